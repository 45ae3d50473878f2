"""How a dispatcher runs: its knobs, shared by the loop and the rescue duties."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DispatchOptions:
    max_workers: int = 0  # 0: from config, else from cores and memory
    board: str | None = None
    tick_s: float = 1.0
    poll_s: float = 0.005
    kill_grace_s: float = 5.0
    drain_timeout_s: float = 0.0  # on stop: how long running workers may finish first
    warm: bool = True
    metrics_port: int | None = None  # serve /metrics here (0: any free port)
    metrics_host: str = "127.0.0.1"  # loopback unless told otherwise
