"""`kanban status` and `kanban context` say what a card's commands can read, write and
reach, per profile, with --json too."""

from __future__ import annotations

from pathlib import Path

import pytest

from kanban.service import Kanban
from kanban.state.config import Profile
from kanban.state.config_parse import parse_config
from kanban.state.errors import ConfigError
from kanban.state.sandbox_paths import network_text, reach, reach_lines
from kanban.tools.sandbox import own_network_here
from tests.support.sandbox import require_own_network
from tests.unit.cli.conftest import Cli

CONFIG = """
[profiles.builder]
toolsets = ["kanban", "terminal"]
network = false
sandbox_read = ["/srv/reference"]
sandbox_write = ["/srv/exports"]

[profiles.writer]
toolsets = ["kanban", "file"]
"""


def home_of(kanban: Kanban) -> Path:
    return Path(kanban.db.display).parent


def test_status_lists_each_command_profiles_reads_writes_and_network(
        cli: Cli, kanban: Kanban, isolated_env: Path) -> None:
    (home_of(kanban) / "config.toml").write_text(CONFIG)
    data = cli.json("status", "--json")["reach"]
    builder = data["builder"]
    assert "writer" not in data and "general" in data  # only profiles that run commands
    assert "/usr" in builder["read"] and "/srv/reference" in builder["read"]
    assert "/root" not in builder["read"] and not any("/run" in p for p in builder["read"])
    assert "/srv/exports" in builder["write"]
    assert "/srv/reference" not in builder["write"]
    assert builder["network"] is False and data["general"]["network"] is True
    text = cli.ok("status").stdout
    assert "profile builder commands (auto):" in text
    assert "network: off (no TCP, no host Unix sockets)" in text
    assert "writes: the card's workspace, /tmp (private), HOME (the card's own), " \
        "/srv/exports" in text


def test_context_says_what_the_cards_commands_can_touch(cli: Cli, kanban: Kanban) -> None:
    (home_of(kanban) / "config.toml").write_text(CONFIG)
    cli.add("build it", "--profile", "builder")
    data = cli.json("context", "1", "--json")["reach"]
    own = f"HOME {home_of(kanban) / 'homes' / 'default' / '1'}"
    assert own in data["read"] and own in data["write"] and data["network"] is False
    text = cli.ok("context", "1").stdout
    assert "reads: /usr," in text and "/srv/reference" in text
    assert "network: off" in text


def test_a_cards_host_list_is_named_by_status_and_context(cli: Cli, kanban: Kanban) -> None:
    (home_of(kanban) / "config.toml").write_text(
        '[profiles.fetcher]\ntoolsets = ["kanban", "terminal", "web"]\n'
        'network = ["pypi.org", "*.pythonhosted.org"]\n')
    cli.add("install it", "--profile", "fetcher")
    assert cli.json("status", "--json")["reach"]["fetcher"]["network"] == \
        ["pypi.org", "*.pythonhosted.org"]
    assert cli.json("context", "1", "--json")["reach"]["network"] == \
        ["pypi.org", "*.pythonhosted.org"]
    for command in (("status",), ("context", "1")):
        assert "network: only pypi.org, *.pythonhosted.org" in cli.ok(*command).stdout


def test_without_bwrap_an_auto_profile_is_shown_unsandboxed(
        cli: Cli, kanban: Kanban, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sandbox = "auto" on a host without bwrap runs commands plainly: context says so
    rather than list a wall that is not there."""
    (home_of(kanban) / "config.toml").write_text(CONFIG)
    cli.add("build it", "--profile", "builder")
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    data = cli.json("context", "1", "--json")["reach"]
    assert data["unsandboxed"] == "bwrap is not installed on this host", data
    assert "/srv/reference" not in data["read"]
    text = cli.ok("context", "1").stdout
    assert "(unsandboxed: bwrap is not installed on this host)" in text
    assert "network: off for the web tools; commands are not held to it" in text


def test_a_host_list_network_renders_as_its_hosts() -> None:
    assert network_text(["pypi.org", "*.pythonhosted.org"]) == \
        "only pypi.org, *.pythonhosted.org"
    assert network_text(True) == "on" and network_text(False).startswith("off")
    unsandboxed = reach(Profile(sandbox="off", toolsets=("terminal",)),
                        own_network=own_network_here)
    assert unsandboxed["network"] is True
    assert "unsandboxed" in reach_lines(unsandboxed)[0]


def test_grants_expand_the_real_home_and_nonsense_is_refused_in_one_line(
        isolated_env: Path) -> None:
    board = Path("/srv/project/.kanban/config.toml")
    config = parse_config({"profiles": {"p": {"sandbox_read": "~/data"}}}, board)
    assert config.profiles["p"].sandbox_read == (str(isolated_env / "data"),)
    for key, value, reason in [
            ("sandbox_read", ["data"], "is not an absolute path"),
            ("sandbox_write", ["/"], "is the whole host"),
            ("sandbox_read", ["/srv/../etc"], "must not contain '..'"),
            ("sandbox_write", ["/srv/project/.kanban/logs"], "lies in the board's folder"),
            ("sandbox_read", [3], "must be a list of strings")]:
        try:
            parse_config({"profiles": {"p": {key: value, "network": False}}}, board)
        except ConfigError as exc:
            assert reason in exc.message and "\n" not in exc.message, exc.message
        else:
            raise AssertionError(f"{key} = {value!r} was accepted")
    refused = ("/run/postgresql", "/var/run/docker.sock", "/tmp", "/var/tmp",
               "/tmp/.X11-unix", "/tmp/tmux-1000", "/tmp/ssh-XXXXabcd/agent.42")
    for path in refused:
        try:
            parse_config({"profiles": {"p": {"sandbox_read": [path], "network": False}}}, board)
        except ConfigError as exc:
            assert "host socket place" in exc.message
        else:
            raise AssertionError(f"{path} was granted without a network")
        parse_config({"profiles": {"p": {"sandbox_read": [path]}}}, board)  # network: allowed
    parse_config({"profiles": {"p": {"sandbox_read": ["/tmp/reference-data"],
                                     "network": False}}}, board)  # a folder of its own


def test_a_stdio_server_in_the_board_folder_is_refused_at_load(tmp_path: Path) -> None:
    board = tmp_path / ".kanban"
    (board / "bin").mkdir(parents=True)
    (board / "bin" / "server").write_text("#!/bin/sh\n")
    outside = tmp_path / "tools" / "server"
    outside.parent.mkdir()
    outside.write_text("#!/bin/sh\n")
    for command, args in [(str(board / "bin" / "server"), []),
                          ("python3", [str(board / "bin" / "server")])]:
        raw = {"mcp": {"s": {"command": command, "args": args}},
               "profiles": {"p": {"toolsets": ["kanban", "mcp:s"]}}}
        try:
            parse_config(raw, board / "config.toml")
        except ConfigError as exc:
            assert "inside the board's folder, which the sandbox hides" in exc.message
        else:
            raise AssertionError(f"{command} {args} was accepted")
        raw["profiles"]["p"]["sandbox"] = "off"
        parse_config(raw, board / "config.toml")  # unsandboxed: it starts where it is
    parse_config({"mcp": {"s": {"command": str(outside)}},
                  "profiles": {"p": {"toolsets": ["kanban", "mcp:s"]}}}, board / "config.toml")


def test_a_network_says_whether_this_hosts_own_services_answer(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    require_own_network()
    own = reach(Profile(sandbox="required", toolsets=("terminal",)),
                own_network=own_network_here)
    shared = reach(Profile(sandbox="required", toolsets=("terminal",), reach_host=True),
                   own_network=own_network_here)
    assert reach_lines(own)[2] == ("network: on (its own: this host's own services do not "
                                   "answer, nor do private networks)")
    lan = reach(Profile(sandbox="required", toolsets=("terminal",)),
                own_network=own_network_here, private_networks=True)
    assert lan["private_networks"] and not lan["host_services"]
    assert reach_lines(lan)[2] == ("network: on (its own: this host's own services do not "
                                   "answer; private networks do: [web] allow_private)")
    assert shared["host_services"] and shared["reach_host"]
    assert reach_lines(shared)[2] == ("network: on (the host's: its own services answer "
                                      "too, reach_host)")
    bwrap = tmp_path / "bwrap"
    bwrap.write_text("#!/bin/sh\n")
    bwrap.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))  # a bwrap, no slirp4netns
    missing = reach(Profile(sandbox="required", toolsets=("terminal",)),
                    own_network=own_network_here)
    assert reach_lines(missing)[2] == ("network: on (the host's: its own services answer "
                                       "too, no network of its own on this host)")
