"""The model gateway makes calls with the card's keys for whoever hands it a socket. A
command the model runs must not be able to: the worker's way to the gateway (a socket it
inherited from the forkserver) is never inherited by a command, sandboxed or not, and the
gateway has no name to connect to."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban.agent import gateway
from kanban.tools.runner import PlainRunner
from tests.support.sandbox import card_runner, run_in, sandbox_workspace

LIST_FDS = "for f in /proc/self/fd/*; do readlink $f; done; echo LISTED"


@pytest.fixture
def intake() -> Iterator[socket.socket]:
    """This process holds a way to a gateway, as a forked worker does."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    gateway._intake = ours
    try:
        yield theirs
    finally:
        gateway.forget()
        theirs.close()


def sockets_in(listing: str) -> list[str]:
    assert "LISTED" in listing, listing
    return [line for line in listing.splitlines() if line.startswith("socket:")]


def test_a_plain_command_inherits_no_socket(intake: socket.socket, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    result, listing = run_in(PlainRunner(), workspace, LIST_FDS)
    assert result.exit_code == 0 and sockets_in(listing) == []


@pytest.mark.parametrize("session", [True, False], ids=["card-sandbox", "bwrap-each"])
def test_a_sandboxed_command_inherits_no_socket(intake: socket.socket, tmp_path: Path,
                                                session: bool) -> None:
    workspace = sandbox_workspace(tmp_path)
    box = card_runner(workspace, session=session)
    try:
        result, listing = run_in(box, workspace, LIST_FDS)
        assert result.exit_code == 0 and sockets_in(listing) == []
    finally:
        box.close()


def test_the_gateway_has_no_name_to_connect_to(intake: socket.socket) -> None:
    """Neither end of the way in is bound: no path and no abstract name another process
    (a command with the host's network) could connect to."""
    assert intake.getsockname() in ("", b"")
    fd = gateway.intake_fd()
    assert fd is not None
    with socket.socket(fileno=os.dup(fd)) as ours:
        assert ours.getsockname() in ("", b"")
        assert not ours.get_inheritable()  # closed across exec: no command gets it
