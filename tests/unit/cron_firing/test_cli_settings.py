"""`kanban cron add/edit/history/tick/redeliver` with kinds, settings and delivery targets."""

from __future__ import annotations

from pathlib import Path

import pytest

from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.procs import wait_until
from tests.unit.cron_firing.conftest import CronCli
from tests.unit.cron_firing.helpers import cards_of, events


@pytest.fixture
def configured(cli: CronCli) -> CronCli:
    (cli.db_path.parent / "config.toml").write_text(
        "[profiles.writer]\nmodel = 'scripted:demo'\n[delivery]\nwebhook_secret = 's3cret'\n")
    return cli


def test_add_a_script_job_with_settings_and_targets(configured: CronCli, tmp_path: Path,
                                                    kb: Kanban) -> None:
    card = kb.add_card(NewCard("inbox")).id
    added = configured.json(
        "add", "backup", "-s", "every 2h", "--script", "tar czf - . | wc -c",
        "--timeout", "90", "--max-attempts", "2", "--priority", "5", "--profile", "writer",
        "--workspace", "scratch", "--jitter", "1m", "--catch-up", "skip",
        "--deliver", f"file:{tmp_path / 'log.md'}", "--deliver", "webhook:http://127.0.0.1:9/h",
        "--deliver", "cmd:cat", "--deliver", f"board:#{card}")
    assert (added["kind"], added["script"], added["timeout_s"]) == ("script", "tar czf - . | "
                                                                    "wc -c", 90.0)
    assert (added["max_attempts"], added["priority"], added["profile"]) == (2, 5, "writer")
    assert (added["jitter_s"], added["catch_up"], added["workspace"]) == (60, "skip", "scratch")
    assert added["deliver"] == [f"file:{tmp_path / 'log.md'}", "webhook:http://127.0.0.1:9/h",
                                "cmd:cat", f"board:{card}"]


def test_a_relative_file_target_is_stored_absolute(configured: CronCli, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    added = configured.json("add", "j", "-s", "@daily", "--script", "date",
                            "--deliver", "file:out/../results.md")
    assert added["deliver"] == [f"file:{tmp_path / 'results.md'}"]


def test_add_a_chained_agent_job(configured: CronCli) -> None:
    configured.ok("add", "fetch", "-s", "@hourly", "--script", "date")
    added = configured.json("add", "digest", "-s", "@daily", "--goal", "summarise",
                            "--context-from", "fetch", "--model", "scripted:demo",
                            "--toolsets", "kanban")
    assert (added["kind"], added["context_from"]) == ("chain", ["fetch"])
    assert (added["model"], added["toolsets"]) == ("scripted:demo", ["kanban"])
    text = configured.ok("show", "digest").stdout
    assert "reads the latest results of: fetch" in text and "chain" in text


@pytest.mark.parametrize(("args", "message"), [
    (["--profile", "nobody"], "unknown profile 'nobody' (known: bash, default, general, lead, "
                              "writer)"),
    (["--model", "gpt-4"], "model spec 'gpt-4' must look like openai:MODEL"),
    (["--model", "acme:big"], "unknown model provider 'acme'"),
    (["--model", "scripted:no-such-script"], "unknown script 'no-such-script'"),
    (["--toolsets", "kanban,telepathy"], "unknown toolset(s) 'telepathy' (known: kanban, file, "
                                         "terminal, web)"),
    (["--toolsets", "delegate"], "toolset 'delegate' is the lead's own"),
    (["--deliver", "sms:+123"], "unknown delivery target 'sms:+123' (use file:PATH, "
                                "webhook:URL, cmd:COMMAND or board:CARD)"),
    (["--deliver", "file:/no/such/folder/x.md"], "folder /no/such/folder does not exist"),
    (["--deliver", "file:/tmp"], "delivery target file:/tmp: is a directory"),
    (["--deliver", "cmd:no-such-program-here --flag"], "program 'no-such-program-here' is not "
                                                       "on PATH"),
    (["--deliver", "board:999"], "delivery target board:999: no card #999"),
    (["--deliver", "webhook:mailto:x"], "a webhook needs an http:// or https:// URL"),
    (["--context-from", "ghost"], "--context-from: no cron job named 'ghost'"),
    (["--timeout", "soon"], "unknown unit 'soon'"),
    (["--timeout", "0"], "timeout must be positive"),
    (["--jitter", "2 fortnights"], "unknown unit 'fortnights'"),
    (["--workspace", "here"], "invalid workspace 'here'"),
    (["--max-attempts", "0"], "max attempts must be between 1 and 100"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_add_refuses_what_it_does_not_know_with_one_line(configured: CronCli, args: list[str],
                                                         message: str) -> None:
    assert message in configured.fails("add", "job", "-s", "@daily", "--goal", "g", *args)


def test_a_webhook_needs_a_secret(cli: CronCli, monkeypatch: pytest.MonkeyPatch) -> None:
    message = cli.fails("add", "job", "-s", "@daily", "--goal", "g",
                        "--deliver", "webhook:https://example.org/hook")
    assert "webhooks are signed; set [delivery] webhook_secret in config.toml or " \
           "$KANBAN_WEBHOOK_SECRET" in message
    monkeypatch.setenv("KANBAN_WEBHOOK_SECRET", "from-the-environment")
    cli.ok("add", "job", "-s", "@daily", "--goal", "g",
           "--deliver", "webhook:https://example.org/hook")


def test_add_needs_a_goal_or_a_script(cli: CronCli) -> None:
    assert "give --goal" in cli.fails("add", "job", "-s", "@daily", code=2)


def test_edit_changes_settings_and_clears_them(configured: CronCli, db: Database) -> None:
    configured.ok("add", "poll", "-s", "every 1h", "--goal", "g", "--model", "scripted:demo",
                  "--deliver", "cmd:cat")
    out = configured.ok("edit", "poll", "--schedule", "every 30m", "--priority", "4").stdout
    assert out.startswith("cron job 'poll' changed; next fire ")
    edited = configured.json("edit", "poll", "--clear", "model", "--clear", "deliver",
                             "--timeout", "2m")
    assert (edited["model"], edited["deliver"], edited["timeout_s"]) == (None, [], 120.0)
    assert (edited["schedule"], edited["priority"]) == ("every 30m", 4)
    assert len(events(db, "cron_edited")) == 2


def test_edit_refuses_with_one_line(configured: CronCli) -> None:
    configured.ok("add", "poll", "-s", "every 1h", "--goal", "g")
    assert "nothing to change" in configured.fails("edit", "poll", code=2)
    assert "--clear takes one of" in configured.fails("edit", "poll", "--clear", "name", code=2)
    assert "unknown profile 'x'" in configured.fails("edit", "poll", "--profile", "x")
    assert configured.fails("edit", "nope", "--goal", "x").startswith("no cron job named")


def test_history_text_and_json(configured: CronCli, kb: Kanban) -> None:
    configured.ok("add", "poll", "-s", "every 1h", "--goal", "g")
    empty = configured.ok("history", "poll")  # a status note: stderr, nothing on stdout
    assert (empty.stdout, empty.stderr) == ("", "cron job 'poll' has not fired yet\n")
    fired = configured.json("run", "poll")
    kb.complete(fired["card_id"], "all quiet")
    history = configured.json("history", "poll")
    [fire] = history["fires"]
    assert history["job"] == "poll" and fire["card_id"] == fired["card_id"]
    assert (fire["outcome"], fire["manual"], fire["card_status"]) == ("fired", True, "done")
    assert {"duration_s", "input_tokens", "output_tokens", "deliveries", "attempts"} <= set(fire)
    words = " ".join(configured.ok("history", "poll").stdout.split())
    assert f"#{fired['card_id']} run" in words and "all quiet" in words


def test_tick_fires_what_is_due(configured: CronCli, db: Database) -> None:
    configured.ok("add", "soon", "-s", "every 1s", "--script", "date")
    fired = wait_until(lambda: configured.json("tick")["fired"], timeout=10,
                       what="an every-second job to be due")
    assert [(f["job"], f["outcome"]) for f in fired] == [("soon", "fired")]
    assert len(cards_of(db, "soon")) == 1


def test_tick_delivers_finished_results(configured: CronCli, tmp_path: Path,
                                        kb: Kanban) -> None:
    target = tmp_path / "results.md"
    configured.ok("add", "nightly", "-s", "@daily", "--script", "date",
                  "--deliver", f"file:{target}")
    card = configured.json("run", "nightly")["card_id"]
    assert configured.json("tick") == {"fired": [], "deliveries": []}  # the card runs still
    kb.complete(card, "the date")
    [delivery] = configured.json("tick")["deliveries"]
    assert (delivery["status"], delivery["attempt"], delivery["card_id"]) == ("delivered", 1,
                                                                              card)
    assert f"cron job nightly · card #{card} done\nthe date\n" in target.read_text()
    assert configured.ok("tick").stdout == "nothing was due\n"


def test_redeliver_queues_failed_deliveries(configured: CronCli, db: Database) -> None:
    configured.ok("add", "poll", "-s", "@daily", "--goal", "g")
    assert configured.ok("redeliver", "poll").stdout == \
        "cron job 'poll' has no failed deliveries\n"
    fired = configured.json("run", "poll")
    with db.write() as conn:  # as the courier leaves a delivery whose attempts are spent
        conn.execute("INSERT INTO cron_delivery (fire_id, job, card_id, target, status, "
                     "attempts, next_attempt_at, created_at, updated_at) SELECT id, job, "
                     "card_id, 'cmd:cat', 'failed', 8, fired_at, fired_at, fired_at "
                     "FROM cron_fire WHERE card_id = :card", {"card": fired["card_id"]})
    assert configured.ok("redeliver", "poll").stdout == \
        "1 failed delivery of 'poll' queued again\n"
    with db.read() as conn:
        assert conn.all("SELECT status, attempts FROM cron_delivery") == [("pending", 0)]
    assert [e["data"]["job"] for e in events(db, "cron_redeliver")] == ["poll"]
