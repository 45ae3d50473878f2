"""A PgBouncer of the test's own (Debian's /usr/sbin/pgbouncer) in front of the local
PostgreSQL: transaction pooling, a fresh free port and a temporary config; skipped when
missing (a failure under CI=true). Root runs it as `nobody` (PgBouncer refuses root)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tests.support.db import PG_HOST, PG_PORT, PG_USER
from tests.support.pg import skip_or_fail

PGBOUNCER = "/usr/sbin/pgbouncer"


def find_pgbouncer() -> str:
    found = PGBOUNCER if os.access(PGBOUNCER, os.X_OK) else shutil.which("pgbouncer")
    if found is None:
        skip_or_fail("pgbouncer is not installed (Debian package pgbouncer; `make pgbouncer`)")
    assert found is not None
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """One pgbouncer process; `restart(down_s)` stops it at once and starts it again on the
    same port after `down_s` seconds."""

    def __init__(self, folder: Path, *, pool_size: int = 20, max_clients: int = 2000,
                 extra: str = "") -> None:
        self.binary = find_pgbouncer()
        self.folder = folder
        self.port = free_port()
        self.config = folder / "pgbouncer.ini"
        self.log = folder / "pgbouncer.log"
        self.config.write_text(
            "[databases]\n"
            f"* = host={PG_HOST} port={PG_PORT} user={PG_USER}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            "auth_type = any\npool_mode = transaction\n"
            f"default_pool_size = {pool_size}\nmax_db_connections = {pool_size}\n"
            f"max_client_conn = {max_clients}\n"
            "ignore_startup_parameters = extra_float_digits\n"
            "server_check_delay = 0\n" + extra)
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, pg_url: str) -> str:
        """The same database as `pg_url`, through this pgbouncer."""
        return pg_url.replace(f"@{PG_HOST}:{PG_PORT}/", f"@127.0.0.1:{self.port}/")

    def start(self) -> PgBouncer:
        user = ["-u", "nobody"] if os.geteuid() == 0 else []
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([self.binary, *user, str(self.config)], stdout=out,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("pgbouncer did not start: " + self.log.read_text())
            time.sleep(0.02)
        return self

    def _answers(self) -> bool:
        with socket.socket() as sock:
            sock.settimeout(0.2)
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # immediate shutdown: clients cut off
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self, down_s: float) -> None:
        self.stop()
        time.sleep(down_s)  # the outage itself is what is under test, not a wait for state
        self.start()


@contextmanager
def pgbouncer(folder: Path, **kwargs: object) -> Iterator[PgBouncer]:
    folder.mkdir(parents=True, exist_ok=True)
    bouncer = PgBouncer(folder, **kwargs).start()  # type: ignore[arg-type]
    try:
        yield bouncer
    finally:
        with suppress(Exception):
            bouncer.stop()
