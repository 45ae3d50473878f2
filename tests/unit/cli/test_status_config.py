"""`kanban status` checks the config it names (issue 29, item 6)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.cli.conftest import Cli

BROKEN = '[profiles.default]\nmodel = "scripted:x"\nmax_turns = "many"\n'


def test_status_names_the_file_in_use_from_kanban_config(cli: Cli, tmp_path: Path) -> None:
    chosen = tmp_path / "elsewhere.toml"
    chosen.write_text('[profiles.default]\nmodel = "scripted:x"\n')
    result = cli("status", "--json", env={"KANBAN_CONFIG": str(chosen)})
    assert result.exit_code == 0, result.stderr
    shown = json.loads(result.stdout)
    assert (shown["config"], shown["config_exists"], shown["config_error"]) == (
        str(chosen), True, None)
    text = cli("status", env={"KANBAN_CONFIG": str(chosen)}).stdout
    assert f"config: {chosen}" in text


def test_a_broken_config_fails_status_with_dispatchs_error(cli: Cli) -> None:
    config = cli.db_path.parent / "config.toml"
    config.write_text(BROKEN)
    dispatch_error = cli.fails("dispatch", "--once")
    result = cli("status")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [f"kanban: error: {dispatch_error}"]
    assert "broken" in result.stdout and str(config) in result.stdout
    shown = cli("status", "--json")
    assert shown.exit_code == 1
    assert json.loads(shown.stdout)["config_error"] == dispatch_error


def test_a_missing_kanban_config_file_is_an_error(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    result = cli("status", env={"KANBAN_CONFIG": str(missing)})
    assert result.exit_code == 1
    assert "no such config file" in result.stderr and str(missing) in result.stderr
