"""`kanban cron ...`: each command's output, its --json shape, and one-line errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import click
import pytest

from kanban.cli.status_text import cron_lines
from kanban.cron.firing import fire_due_jobs
from kanban.cron.jobs import JobSpec
from kanban.cron.service import CronJobs, next_fires
from kanban.service import Kanban
from kanban.state.store import Database
from tests.unit.cron_firing.conftest import CronCli, cli_app
from tests.unit.cron_firing.helpers import cards_of, events, job

JOB_KEYS = {"id", "name", "board", "kind", "schedule", "timezone", "title", "goal", "script",
            "context_from", "profile", "model", "toolsets", "timeout_s", "max_attempts",
            "workspace", "priority", "deliver", "catch_up", "jitter_s", "enabled", "overlap",
            "next_fire_at", "last_fire_at", "last_card_id", "created_at", "skills", "review"}
COMMANDS = {"cron", "cron add", "cron edit", "cron list", "cron show", "cron history",
            "cron rm", "cron enable", "cron disable", "cron run", "cron tick", "cron redeliver"}


def walk(command: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            yield from walk(command.get_command(ctx, name), f"{path} {name}".strip())


def test_every_command_and_option_has_help() -> None:
    commands = dict(walk(cli_app()))
    assert set(commands) >= COMMANDS
    for path in COMMANDS:
        command = commands[path]
        assert (command.help or "").strip(), f"`kanban {path}` has no help"
        for param in command.params:
            if isinstance(param, click.Option):
                assert (param.help or "").strip(), f"{path}: {param.name}"


def test_add_prints_the_next_fire(cli: CronCli) -> None:
    out = cli.ok("add", "poll", "--schedule", "every 2h", "--goal", "poll the feed").stdout
    assert out.startswith("cron job 'poll' added (agent); next fire ") and out.endswith(" UTC\n")


def test_add_json_has_every_option(cli: CronCli, kb: Kanban) -> None:
    kb.create_board("ops")
    (cli.db_path.parent / "config.toml").write_text("[profiles.writer]\n")
    added = cli.json("add", "standup", "-s", "0 9 * * mon-fri", "--goal", "agenda",
                     "--title", "Stand-up", "--board", "ops", "--profile", "writer",
                     "--tz", "Europe/Berlin", "--overlap", "allow")
    assert set(added) == JOB_KEYS
    assert {k: added[k] for k in ("name", "board", "schedule", "timezone", "title", "goal",
                                  "profile", "enabled", "overlap")} == {
        "name": "standup", "board": "ops", "schedule": "0 9 * * mon-fri",
        "timezone": "Europe/Berlin", "title": "Stand-up", "goal": "agenda",
        "profile": "writer", "enabled": True, "overlap": "allow"}
    local = datetime.fromisoformat(added["next_fire_at"]).astimezone(ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute) == (9, 0) and local.weekday() < 5


def test_add_uses_the_board_from_the_environment(cli: CronCli, kb: Kanban) -> None:
    kb.create_board("ops")
    result = cli.runner.invoke(cli.app, ["--db", str(cli.db_path), "cron", "add", "x",
                                         "-s", "@daily", "--goal", "g"],
                               env={"KANBAN_BOARD": "ops"})
    assert result.exit_code == 0, result.stderr
    assert job_board(cli) == "ops"


def job_board(cli: CronCli) -> str:
    return str(cli.json("list")["jobs"][0]["board"])


@pytest.mark.parametrize(("args", "message"), [
    (["-s", "61 * * * *"], "invalid cron expression '61 * * * *': minute: the last value (61) "
                           "is higher than the maximum value (59)"),
    (["-s", "* * * *"], "expected 5 fields (minute hour day-of-month month day-of-week), got 4"),
    (["-s", "0 0 31 2 *"], "invalid cron expression '0 0 31 2 *': it never fires"),
    (["-s", "@sometimes"], "unknown alias"),
    (["-s", "every 5 parsecs"], "unknown unit 'parsecs' (use s, m, h, d or w)"),
    (["-s", "every 0s"], "interval must be positive"),
    (["-s", "in 1.5s"], "delay must be a whole number of seconds"),
    (["-s", "2020-01-01T00:00"], "one-shot time 2020-01-01T00:00 is in the past"),
    (["-s", "2030-03-31T02:30", "--tz", "Europe/Berlin"],
     "does not exist in Europe/Berlin (skipped by a daylight-saving change)"),
    (["-s", "2030-13-01"], "not an ISO 8601 time"),
    (["-s", "whenever"], "expected a 5-field cron expression"),
    (["-s", " "], "the schedule is empty"),
    (["-s", "@daily", "--tz", "Mars/Olympus"], "unknown timezone 'Mars/Olympus'"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_each_invalid_schedule_is_one_clear_line(cli: CronCli, args: list[str],
                                                 message: str) -> None:
    line = cli.fails("add", "job", "--goal", "g", *args)
    assert message in line


@pytest.mark.parametrize(("args", "message"), [
    (["bad name"], "invalid cron job name 'bad name'"),
    (["job", "--board", "nowhere"], "no board named 'nowhere'"),
    (["job", "--profile", "a b"], "unknown profile 'a b'"),
    (["job", "--profile", "nosuch"], "unknown profile 'nosuch' (known: bash, default, general, "
                                       "lead)"),
])
def test_other_invalid_jobs_are_one_clear_line(cli: CronCli, args: list[str],
                                               message: str) -> None:
    line = cli.fails("add", *args, "-s", "@daily", "--goal", "g")
    assert message in line


def test_usage_errors_exit_2(cli: CronCli) -> None:
    assert "--schedule" in cli.fails("add", "job", "--goal", "g", code=2)
    assert "'queue' is not one of" in cli.fails("add", "job", "-s", "@daily", "--goal", "g",
                                                "--overlap", "queue", code=2)


def test_duplicate_and_unknown_names(cli: CronCli) -> None:
    cli.ok("add", "job", "-s", "@daily", "--goal", "g")
    assert cli.fails("add", "job", "-s", "@hourly", "--goal", "g") == (
        "a cron job named 'job' already exists")
    for command in ("show", "rm", "enable", "disable", "run"):
        assert cli.fails(command, "nope").startswith("no cron job named 'nope'")


def test_list_text_and_json(cli: CronCli) -> None:
    assert "no cron jobs" in cli.ok("list").stdout
    cli.ok("add", "nightly", "-s", "30 2 * * *", "--goal", "g", "--tz", "Europe/Berlin")
    cli.ok("add", "poll", "-s", "every 15m", "--goal", "g")
    cli.ok("disable", "poll")
    text = cli.ok("list").stdout
    assert "nightly" in text and "cron 30 2 * * *" in text and "(Europe/Berlin)" in text
    assert "agent" in text
    assert "every 15 minutes" in text and "disabled" in text
    listed = cli.json("list")
    assert [j["name"] for j in listed["jobs"]] == ["nightly", "poll"]
    assert all(set(j) == JOB_KEYS for j in listed["jobs"])
    assert listed["jobs"][1]["enabled"] is False and listed["jobs"][1]["next_fire_at"] is None
    assert cli.json("list", "--board", "default") == listed


def test_show_text_and_json(cli: CronCli, kb: Kanban) -> None:
    cli.ok("add", "poll", "-s", "every 1h", "--goal", "poll the feed", "--title", "Poll")
    fired = cli.json("run", "poll")
    kb.complete(fired["card_id"], "nothing new")
    shown = cli.json("show", "poll")
    assert set(shown) == {"job", "description", "next_fires", "fires", "undelivered"}
    assert shown["description"] == "every hour"
    times = [datetime.fromisoformat(t) for t in shown["next_fires"]]
    assert len(times) == 5
    assert [b - a for a, b in zip(times, times[1:], strict=False)] == [timedelta(hours=1)] * 4
    [fire] = shown["fires"]
    assert fire == {**fire, "outcome": "fired", "manual": True, "card_id": fired["card_id"],
                    "card_status": "done", "result": "nothing new", "error": None,
                    "deliveries": []}
    assert shown["undelivered"] == []
    text = cli.ok("show", "poll").stdout
    assert "cron job poll" in text and "every hour" in text and "next fires:" in text
    words = " ".join(text.split())  # a narrow terminal folds the result column
    assert f"#{fired['card_id']} run" in words and "nothing new" in words


def test_rm_enable_disable(cli: CronCli, db: Database) -> None:
    cli.ok("add", "poll", "-s", "every 1h", "--goal", "g")
    assert cli.ok("disable", "poll").stdout == "cron job 'poll' disabled\n"
    assert not job(db, "poll").enabled
    enabled = cli.ok("enable", "poll").stdout
    assert enabled.startswith("cron job 'poll' enabled; next fire ")
    assert job(db, "poll").enabled
    assert cli.ok("rm", "poll").stdout == "cron job 'poll' removed\n"
    assert cli.json("list") == {"jobs": []}
    kinds = ["cron_added", "cron_disabled", "cron_enabled", "cron_removed"]
    assert [len(events(db, kind)) for kind in kinds] == [1, 1, 1, 1]


def test_run_creates_a_card_now(cli: CronCli, db: Database) -> None:
    cli.ok("add", "nightly", "-s", "0 2 * * *", "--goal", "report")
    before = job(db, "nightly").next_fire_at
    out = cli.ok("run", "nightly").stdout
    [card] = cards_of(db, "nightly")
    assert out == f"cron job 'nightly' fired: #{card['id']}\n"
    result = cli.json("run", "nightly")
    assert set(result) == {"job", "board", "outcome", "card_id", "slots", "scheduled_at",
                           "next_fire_at", "reason"}
    assert (result["outcome"], result["slots"], result["scheduled_at"]) == ("fired", 0, None)
    assert job(db, "nightly").next_fire_at == before
    assert datetime.fromisoformat(result["next_fire_at"]) == before
    cli.ok("disable", "nightly")
    assert "is disabled" in cli.fails("run", "nightly")


def test_a_spent_one_shot_cannot_be_enabled(cli: CronCli, db: Database) -> None:
    then = datetime(2025, 1, 1, tzinfo=UTC)
    CronJobs(db, clock=lambda: then).add(JobSpec("once", "in 1m", goal="g"))
    fire_due_jobs(db, then + timedelta(minutes=2))
    assert "one-shot for 2025-01-01 00:01:00 UTC, which has passed" in cli.fails("enable", "once")


def test_upcoming_view_for_kanban_status(db: Database) -> None:
    start = datetime(2025, 1, 1, 12, tzinfo=UTC)
    jobs = CronJobs(db, clock=lambda: start)
    jobs.add(JobSpec("berlin", "30 14 * * *", timezone="Europe/Berlin"))
    jobs.add(JobSpec("poll", "every 1h"))
    assert cron_lines(next_fires(db, start + timedelta(hours=1, minutes=1), 3),
                      start + timedelta(hours=1, minutes=1)) == [
        "next cron fires:",
        "  2025-01-01 13:00 UTC  poll on default (overdue: no dispatcher fired it)",
        "  2025-01-01 14:30 CET  berlin on default",
        "  2025-01-01 14:00 UTC  poll on default",
    ]
    assert cron_lines([], start) == ["cron: nothing scheduled"]


def test_kanban_status_lists_the_jobs_that_will_fire(cli: CronCli, kb: Kanban) -> None:
    """`kanban status` asks first whether any job will fire (cron's modules load only then):
    an enabled job shows, on its board only; a disabled one does not."""
    kb.create_board("ops")
    cli.ok("add", "poll", "--schedule", "every 2h", "--goal", "poll the feed", "--board", "ops")
    def status(*first: str) -> list[dict[str, Any]]:
        done = cli.runner.invoke(cli.app, ["--db", str(cli.db_path), *first, "status", "--json"])
        assert done.exit_code == 0, (done.stdout, done.stderr)
        fires: list[dict[str, Any]] = json.loads(done.stdout)["next_fires"]
        return fires

    fires = status()
    assert [f["job"] for f in fires] == ["poll"] * len(fires) and fires
    assert status("--board", "default") == []
    assert status("--board", "ops") == fires
    cli.ok("disable", "poll")
    assert status() == []
