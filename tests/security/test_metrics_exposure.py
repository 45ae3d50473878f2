"""Attacks on /metrics: reading it without the board's token, reaching a dispatcher's
endpoint from another machine, and forging samples through a profile or model name (both
user-controlled; a model name is whatever config.toml or a card says)."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.acceptance.conftest import BoardFiles
from tests.security.conftest import Attack
from tests.support.procs import KANBAN, query, start_dispatcher, stop, wait_until
from tests.support.web import TOKEN, start_web

# Each closes the label, ends the sample and writes a forged one after it.
FORGED = 'kanban_cards{board="forged",profile="x",status="done"} 999'
HOSTILE_MODEL = f'openai:m"}} 1\n{FORGED}\n# EOF \\'
HOSTILE_PROFILE = f'p"}} 1\n{FORGED}\n\\"'


def test_metrics_without_the_token_are_refused(board: BoardFiles) -> None:
    board.add("private title")
    web = start_web(board.path)
    try:
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"},
                        {"Authorization": f"Basic {TOKEN}"}):
            response = httpx.get(f"{web.base}/metrics", headers=headers, timeout=30)
            assert response.status_code == 401, headers
            assert "kanban_" not in response.text
        signed_in = httpx.get(f"{web.base}/metrics", timeout=30,
                              headers={"Authorization": f"Bearer {TOKEN}"})
        assert signed_in.status_code == 200 and "kanban_cards" in signed_in.text
    finally:
        web.stop()


def test_a_dispatchers_metrics_listen_on_loopback_only(board: BoardFiles,
                                                       tmp_path: Path) -> None:
    log = tmp_path / "dispatcher.log"
    proc = start_dispatcher(board.path, "--metrics-port", "0", log=log)
    try:
        url = wait_until(lambda: re.search(r"metrics on (http://\S+)", log.read_text()),
                         timeout=60, what="the metrics address").group(1)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert url == f"http://127.0.0.1:{port}/metrics"
        assert _listening(port) == ["127.0.0.1"]  # not 0.0.0.0, not ::
        assert httpx.get(url, timeout=30).status_code == 200
    finally:
        assert stop(proc) == 0
    assert "no authentication" not in log.read_text()


def test_a_metrics_address_it_cannot_bind_is_one_clear_line(board: BoardFiles) -> None:
    # TEST-NET-3: never an address of this machine
    done = subprocess.run([*KANBAN, "--db", str(board.path), "dispatch", "--once",
                           "--metrics-port", "0", "--metrics-host", "203.0.113.7"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert re.search(r"^kanban: error: cannot serve metrics on 203\.0\.113\.7:0: .+$", done.stderr,
                     re.MULTILINE), done.stderr


def test_hostile_profile_and_model_names_cannot_forge_a_sample(attack: Attack) -> None:
    attack.board.configure(f"[profiles.attacker]\nmodel = {json.dumps(HOSTILE_MODEL)}\n")
    card, _ = attack.run([("kanban_comment", {"body": "hello"})])
    assert attack.card(card)[0] == "done"
    with sqlite3.connect(attack.board.path) as conn:  # as an older kanban or a hand edit could
        conn.execute("UPDATE card SET profile = ? WHERE id = ?", (HOSTILE_PROFILE, card))
    [(model,)] = query(attack.board.path, "SELECT DISTINCT model FROM usage")
    assert '"' in model and "\n" in model  # the hostile name reached the stored usage
    web = start_web(attack.board.path)
    try:
        text = httpx.get(f"{web.base}/metrics", timeout=30,
                         headers={"Authorization": f"Bearer {TOKEN}"}).text
    finally:
        web.stop()
    assert not [line for line in text.splitlines() if line.startswith("kanban_cards{board=\"f")]
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert not [s for s in samples if s.labels.get("board") == "forged"]
    cards = [s for s in samples if s.name == "kanban_cards" and s.value]
    assert [(s.labels["profile"], s.value) for s in cards] == [(HOSTILE_PROFILE, 1.0)]
    calls = [s for s in samples if s.name == "kanban_model_calls_total"]
    assert [s.labels["model"] for s in calls] == [model]  # exactly, escapes undone


def _listening(port: int) -> list[str]:
    """The local addresses listening on `port` (IPv4 and IPv6), from /proc/net."""
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.append(_address(address))
    return found


def _address(hex_address: str) -> str:
    if len(hex_address) == 8:  # IPv4, little-endian
        return ".".join(str(b) for b in reversed(bytes.fromhex(hex_address)))
    return "ipv6:" + hex_address
