"""The references in docs/reference/ are the generator's output, and nothing the CLI or
config.toml accepts goes undocumented (`make reference` regenerates both files)."""

from __future__ import annotations

import difflib
import re
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import click
import pytest

from kanban.cli.app import app
from kanban.cli.reference import CLI_MD, CONFIG_MD, REPO, context, main, outputs, walk
from kanban.state.config import Config
from kanban.state.config_keys import Key, key_of, keys
from kanban.state.config_parse import TABLES, Table, parse_config
from kanban.state.config_values import kind_of
from kanban.state.errors import ConfigError

NOT_KEYS = {"name"}  # record fields that are not config keys (a profile's or server's name)
NOT_TABLES = {"path", "hook_entry_points"}  # Config fields that no table of their own fills
# A valid value per kind, where a key's default cannot stand in for one.
SAMPLES: dict[str, Any] = {
    "boolean": True, "non-negative integer": 7, "positive number": 2.5,
    "non-negative number": 1.5, "string": "x", "list of strings": ["kanban"],
    "string or list of strings": "ONE", "table of strings": {"K": "v"},
    "boolean or list of host patterns": ["pypi.org", "*.pythonhosted.org"],
    'table of host = "IP address"': {"git.internal": "10.0.0.7"},
    "model spec (provider:MODEL)": "openai:gpt-4o", "list of model specs": ["scripted:demo"],
    "http:// or https:// URL": "http://127.0.0.1:11434/v1",
    "list of regular expressions": [r"\brm\b"],
    '"package.module:function" or a list of them': "pkg.mod:fn",
}
PATHS = {"sandbox_read": "/opt", "sandbox_write": "/srv/out"}  # grants must be absolute
BASES = {"prices": {"input": 1, "output": 2}, "mcp": {"command": "prog"}}


def test_the_references_are_the_generators_output() -> None:
    for path, text in outputs().items():
        written = (REPO / path).read_text() if (REPO / path).exists() else ""
        changes = list(difflib.unified_diff(written.splitlines(), text.splitlines(), "written",
                                            "generated", n=0, lineterm=""))
        assert not changes, (f"{path} is out of date: run `make reference` and commit it\n"
                             + "\n".join(changes[:20]))


def test_make_reference_writes_what_check_then_finds_current(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check"], root=tmp_path) == 1
    assert f"{CLI_MD}: out of date; run `make reference`" in capsys.readouterr().err
    assert main([], root=tmp_path) == 0
    assert (tmp_path / CONFIG_MD).read_text() == outputs()[CONFIG_MD]
    assert main(["--check"], root=tmp_path) == 0
    (tmp_path / CONFIG_MD).write_text("edited by hand\n")
    assert main(["--check"], root=tmp_path) == 1
    assert capsys.readouterr().err.strip() == f"{CONFIG_MD}: out of date; run `make reference`"


def test_every_command_option_and_argument_is_in_the_cli_reference() -> None:
    text = (REPO / CLI_MD).read_text()
    root = context(app, "kanban")
    for command, ctx in walk(app, root):
        assert (command.help or "").strip(), f"`{ctx.command_path}` has no help"
        if ctx.parent is not None:
            assert f"\n## {ctx.command_path}\n" in text, ctx.command_path
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert (param.help or "").strip(), f"`{ctx.command_path}` {param.opts[0]}"
                assert f"`{param.opts[0]}" in text, (ctx.command_path, param.opts[0])
            elif isinstance(param, click.Argument):
                assert f"- `{param.make_metavar(ctx)}`:" in text, (ctx.command_path, param.name)


def test_the_references_are_plain_markdown() -> None:
    """No raw HTML (MkDocs would pass it through): `<` outside code is escaped."""
    for path in (CLI_MD, CONFIG_MD):
        text = re.sub(r"```.*?```", "", (REPO / path).read_text(), flags=re.S)
        prose = re.sub(r"`[^`\n]*`", "", text)
        assert "<" not in prose, path


def test_every_record_field_is_a_declared_key() -> None:
    """A field without setting(...) is refused by the parser: it must be meant that way."""
    for table in TABLES:
        for item in fields(table.record):
            key = key_of(item)
            if key is None:
                assert item.name in NOT_KEYS, f"{table.heading}.{item.name} is undeclared"
                continue
            assert key.doc.strip() and "\n" not in key.doc
            assert kind_of(item, key).name  # a kind the parser and the reference know


def test_every_config_field_comes_from_a_listed_table() -> None:
    tabled = {item.name for item in fields(Config)} - NOT_TABLES
    assert tabled == {table.name for table in TABLES}


def test_a_key_needs_a_one_line_description() -> None:
    for doc in ("", "  ", "two\nlines"):
        with pytest.raises(ValueError, match="one non-empty line"):
            Key(doc)


def raw(table: Table, values: dict[str, Any]) -> dict[str, Any]:
    """A config holding `values` in `table` (in its table `x` when it holds named ones)."""
    values = {**BASES.get(table.name, {}), **values}
    if "url" in values:  # a server is a command or a url, never both
        values.pop("command", None)
    return {table.name: {"x": values} if table.each else values}


def sample(name: str, item: Any, key: Key) -> Any:
    """A value the key accepts: its default when TOML can write it, else its kind's."""
    if name in PATHS:
        return PATHS[name]
    if key.choices:
        return key.choices[0]
    default = item.default if item.default_factory is MISSING else None
    if default not in (None, (), "") and not isinstance(default, bool):
        return list(default) if isinstance(default, tuple) else default
    return SAMPLES[kind_of(item, key).name]


def declared() -> list[tuple[Table, str, Any, Key]]:
    return [(table, name, item, key) for table in TABLES
            for name, (item, key) in keys(table.record).items()]


@pytest.mark.parametrize(("table", "name", "item", "key"), declared(),
                         ids=[f"{t.name}.{n}" for t, n, _, _ in declared()])
def test_each_documented_key_is_accepted_and_documented(table: Table, name: str, item: Any,
                                                        key: Key) -> None:
    parse_config(raw(table, {name: sample(name, item, key)}))
    rows = (REPO / CONFIG_MD).read_text().split(f"## `{table.heading}`", 1)[1]
    assert f"\n| `{name}` |" in rows.split("\n## ", 1)[0]


@pytest.mark.parametrize("table", TABLES, ids=[t.name for t in TABLES])
def test_an_undocumented_key_is_refused(table: Table) -> None:
    for name in ("undocumented_key", *NOT_KEYS & {f.name for f in fields(table.record)}):
        with pytest.raises(ConfigError, match=f"unknown (key|event) '{name}'"):
            parse_config(raw(table, {name: "x"}))


def test_an_unlisted_table_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'telemetryy' \(the tables are \[limits\]"):
        parse_config({"telemetryy": {}})


@pytest.mark.parametrize(("table", "name", "item", "key"),
                         [d for d in declared() if d[3].range or d[3].choices],
                         ids=[f"{t.name}.{n}" for t, n, _, k in declared() if k.range or k.choices])
def test_declared_ranges_and_choices_are_enforced(table: Table, name: str, item: Any,
                                                  key: Key) -> None:
    if key.range is not None:
        below = key.range.low if key.range.exclusive else key.range.low - 1
        with pytest.raises(ConfigError, match=re.escape(f".{name}")):
            parse_config(raw(table, {name: below}))
        if key.range.high is not None:
            above = key.range.high if key.range.exclusive else key.range.high * 2
            with pytest.raises(ConfigError, match=re.escape(f".{name}")):
                parse_config(raw(table, {name: above}))
    if key.choices:
        with pytest.raises(ConfigError, match=re.escape(f".{name} must be ")):
            parse_config(raw(table, {name: "zz-none-of-these"}))
