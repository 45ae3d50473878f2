"""A loopback TCP relay that can be cut: after `cut()` it stops passing bytes either way
and answers no new connection, but closes nothing (a peer behind a dead route, or a
firewall dropping packets: the worst case, where only timeouts tell)."""

from __future__ import annotations

import selectors
import socket
import threading
from contextlib import suppress


class CuttableRelay:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._cut = threading.Event()
        self._stop = threading.Event()
        self._held: list[socket.socket] = []  # accepted while cut: never answered
        self._thread = threading.Thread(target=self._run, name="tcp-relay", daemon=True)

    def start(self) -> CuttableRelay:
        self._thread.start()
        return self

    def cut(self) -> None:
        self._cut.set()

    def mend(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for key in list(self._selector.get_map().values()):
            with suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        for sock in self._held:
            with suppress(OSError):
                sock.close()
        self._selector.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.05):
                if key.data is None:
                    self._accept()
                elif self._cut.is_set():  # frozen for good: never read, never closed
                    for sock in (key.fileobj, key.data):
                        with suppress(KeyError, ValueError):
                            self._selector.unregister(sock)
                        self._held.append(sock)  # type: ignore[arg-type]
                else:
                    self._pump(key.fileobj, key.data)  # type: ignore[arg-type]

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        if self._cut.is_set():
            self._held.append(client)
            return
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        for sock in (client, server):
            sock.setblocking(False)
        self._selector.register(client, selectors.EVENT_READ, server)
        self._selector.register(server, selectors.EVENT_READ, client)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            data = source.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            with suppress(OSError):
                sink.setblocking(True)
                sink.sendall(data)
                sink.setblocking(False)
            return
        for sock in (source, sink):
            with suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            with suppress(OSError):
                sock.close()
