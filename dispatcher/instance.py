"""Who a dispatcher is: a random instance id on a host, in one boot of that host.

A worker process is named by (host boot, pid, process start time): a pid alone is
reused after a restart (a container's pids start again from 1), a hostname alone is
shared by every boot of the host. Rescue acts on a process only when all three match.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from kanban import control
from kanban.state.host import boot_id, booted_at, is_same_process, process_start

if TYPE_CHECKING:
    from kanban.service import Kanban

__all__ = ["Instance", "boot_id", "booted_at", "is_same_process", "process_start",
           "register"]


@dataclass(frozen=True)
class Instance:
    """This dispatcher process, as recorded in its `dispatcher` row."""

    id: str = field(default_factory=lambda: secrets.token_hex(16))
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    boot_id: str | None = field(default_factory=boot_id)
    booted_at: datetime | None = field(default_factory=booted_at)


def register(kb: Kanban, instance: Instance, board: str | None) -> int:
    """This dispatcher's row (its host, process and boot) with what sandbox this host gives
    commands; its id."""
    from kanban.tools.sandbox import check_sandbox

    sandbox = check_sandbox()
    with kb.db.write() as conn:
        dispatcher_id = control.register_dispatcher(
            conn, host=instance.host, pid=instance.pid, now=kb.clock(), board=board,
            instance=instance.id, boot_id=instance.boot_id, booted_at=instance.booted_at)
        control.set_sandbox(conn, dispatcher_id, sandbox.reason)
        return dispatcher_id
