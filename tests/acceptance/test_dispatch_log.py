"""`kanban dispatch` as a person watches it: a log line per card event, stop signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.acceptance.conftest import BoardFiles, slow_steps
from tests.support.procs import KANBAN, wait_until


def dispatcher(board: BoardFiles, *args: str, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KANBAN_", "OPENAI_", "ANTHROPIC_"))}
    with open(log, "wb") as out:
        return subprocess.Popen([*KANBAN, "--db", str(board.path), "dispatch", *args],
                                stdout=subprocess.DEVNULL, stderr=out, env=env)


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_json_log_per_card_event_and_a_graceful_stop(board: BoardFiles, tmp_path: Path,
                                                     sig: signal.Signals) -> None:
    model = board.script("slow", slow_steps(delay=0.2, heartbeats=3))
    card = board.add("slow card", goal="take a moment")
    board.configure(f'[profiles.default]\nmodel = "{model}"\n')
    stderr, file_log = tmp_path / "stderr.txt", tmp_path / "dispatch.jsonl"
    # --drain-timeout: the running card may finish (by default it would be handed back)
    proc = dispatcher(board, "--log-format", "json", "--log-file", str(file_log),
                      "--drain-timeout", "60", log=stderr)
    try:
        wait_until(lambda: any('"claimed"' in line for line in lines(file_log)), timeout=60,
                   what="the claim logged")
        proc.send_signal(sig)  # stop claiming; the running card finishes
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert board.kb.card(card).status == "done"
    events = [json.loads(line) for line in lines(file_log)]
    by_kind = {e["kind"]: e for e in events if "kind" in e}
    claimed, finished = by_kind["claimed"], by_kind["finished"]
    assert (claimed["card"], claimed["attempt"]) == (card, 1) and claimed["pid"] > 0
    assert (finished["card"], finished["status"], finished["outcome"]) == (card, "done",
                                                                        "completed")
    assert finished["pid"] == claimed["pid"] and finished["duration_s"] > 0
    assert finished["input_tokens"] > 0 and finished["exit_code"] == 0
    assert "draining" in by_kind
    assert lines(stderr)[:1] == [f"dispatching from {board.path} (Ctrl-C to stop)"]
    assert [json.loads(line)["kind"] for line in lines(stderr)[1:-1] if line.startswith("{")] \
        == [e["kind"] for e in events]  # the same events on stderr


def test_text_log_and_ctrl_c_exits_130(board: BoardFiles, tmp_path: Path) -> None:
    card = board.add("quick card")
    stderr = tmp_path / "stderr.txt"
    proc = dispatcher(board, log=stderr)
    try:
        wait_until(lambda: board.kb.card(card).status == "done", timeout=60, what="card done")
        wait_until(lambda: any(" finished" in line or "#1 done" in line
                               for line in lines(stderr)), timeout=30, what="its log line")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "\n".join(lines(stderr))
    assert f"claimed #{card} attempt 1 on default: worker pid " in text
    assert f"#{card} done (completed) after " in text and "tokens " in text


def test_a_claim_after_a_hand_back_is_logged_as_the_attempt_it_spends(
        board: BoardFiles, tmp_path: Path) -> None:
    from kanban import transitions
    from kanban.transitions import Actor

    card = board.add("restarted under")
    kb = board.kb
    [first] = kb.claim(1, lease_s=30)
    with kb.db.write() as conn:
        transitions.hand_back(conn, card, "rolling restart", now=kb.clock(),
                              actor=Actor("dispatcher:1", first.claim_token))
    stderr = tmp_path / "stderr.txt"
    proc = dispatcher(board, "--once", log=stderr)
    assert proc.wait(timeout=120) == 0
    assert kb.card(card).status == "done"
    assert f"claimed #{card} attempt 1 on default" in stderr.read_text()  # its second claim


def test_quiet_logs_no_card_lines(board: BoardFiles, tmp_path: Path) -> None:
    card = board.add("quiet card")
    stderr = tmp_path / "stderr.txt"
    proc = dispatcher(board, "-q", "--once", log=stderr)
    assert proc.wait(timeout=120) == 0
    assert board.kb.card(card).status == "done"
    assert "claimed" not in stderr.read_text()


def test_verbose_adds_ticks(board: BoardFiles, tmp_path: Path) -> None:
    card = board.add("verbose card")
    stderr = tmp_path / "stderr.txt"
    proc = dispatcher(board, "-v", "--once", log=stderr)
    assert proc.wait(timeout=120) == 0
    assert board.kb.card(card).status == "done"
    text = stderr.read_text()
    assert "debug: tick: " in text and f"claimed #{card}" in text
