"""A worker's traces: off (the default) it never imports OpenTelemetry; on, a collector
that is down costs a bounded wait at exit and never the card."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.support.otlp import OtlpReceiver

REPO = Path(__file__).resolve().parents[2]
# One worker run in a fresh interpreter: an agent card on the offline demo model, run as a
# dispatcher's worker runs it; then which opentelemetry modules that interpreter loaded.
WORKER = """
import json, os, sys
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state import DbLocation, open_database
from kanban.state.config import Config
from kanban.worker.main import WorkerEnv, run_card
from tests.support.db import LEASE_S, claim_one

path = sys.argv[1]
db = open_database(DbLocation(path, "flag"), create=True)
kb = Kanban(db)
kb.ensure_board("default")
card = kb.add_card(NewCard("say hello"))
claim = claim_one(kb, card.id)
wenv = WorkerEnv(path, claim.board, claim.card_id, claim.claim_token, claim.run_id, LEASE_S)
code = run_card(kb, wenv, Config(), dict(os.environ))
print(json.dumps({"code": code, "status": kb.card(card.id).status,
                  "otel": sorted(m for m in sys.modules if m.startswith("opentelemetry"))}))
"""


def _worker_run(tmp_path: Path, env: dict[str, str]) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("OTEL_", "OPENAI_", "ANTHROPIC_"))}
    workspace = tmp_path / "cwd"
    workspace.mkdir()
    proc = subprocess.run([sys.executable, "-c", WORKER, str(tmp_path / "kanban.db")],
                          cwd=workspace, env={**clean, "PYTHONPATH": str(REPO), **env},
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_worker_with_telemetry_off_never_imports_opentelemetry(tmp_path: Path) -> None:
    ran = _worker_run(tmp_path, {})
    assert ran["code"] == 0 and ran["status"] == "done"
    assert ran["otel"] == []


def test_the_same_run_with_an_endpoint_loads_it_and_exports(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:  # the check above is one that can fail
        ran = _worker_run(tmp_path, receiver.env())
        spans = receiver.spans  # the worker flushed before run_card returned
    assert ran["status"] == "done" and "opentelemetry.sdk.trace" in ran["otel"]  # type: ignore[operator]
    assert [s.name for s in spans if s.parent_id == ""] == ["invoke_agent default"]


def test_a_collector_that_is_down_never_fails_the_card(tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port nothing listens on once closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    started = time.monotonic()
    ran = _worker_run(tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert ran["code"] == 0 and ran["status"] == "done"
    assert time.monotonic() - started < 60  # the export gives up (EXPORT_TIMEOUT_S)
