"""`kanban dispatch --metrics-port`: this dispatcher's own counters, beside the board's.

The process's counters and histograms are fed by its own events (claimed, finished,
spawn_failed, breaker_open, lease_expired: kanban.dispatcher.logs), never by a read of the
database; the board's gauges and counters (kanban.metrics) are read from the counters the
database keeps, at scrape time. Served by one thread on loopback unless told otherwise,
one request at a time (a SQLite connection is per thread: a thread per request would
leave one behind each scrape), with a timeout so a silent client cannot hold it.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    make_wsgi_app,
)
from prometheus_client.process_collector import ProcessCollector

from kanban.dispatcher import logs
from kanban.metrics import BoardCollector
from kanban.state.errors import UsageError

if TYPE_CHECKING:
    from kanban.dispatcher.loop import Dispatcher

DEFAULT_HOST = "127.0.0.1"
# From a warm fork (milliseconds) to a cold interpreter or a slow workspace (seconds).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# From a card that completes at once to one that works for hours.
DURATION_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
                    3600.0, 7200.0)
NOT_RETRIES = ("handed_back",)  # back to ready without spending an attempt
CARD_LABELS = ("board", "profile")


class DispatcherMetrics:
    """One dispatcher's registry: its event counters, its live gauges and the board's."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.registry = registry = CollectorRegistry()
        self.claims = Counter("kanban_dispatcher_claims", "Cards this dispatcher claimed and "
                              "started a worker for.", CARD_LABELS, registry=registry)
        self.finished = Counter("kanban_dispatcher_runs_finished", "Worker runs reaped, by "
                                "the run's outcome.", (*CARD_LABELS, "outcome"),
                                registry=registry)
        self.retries = Counter("kanban_dispatcher_retries", "Runs whose card went back to "
                               "ready for another attempt, by the run's outcome.",
                               (*CARD_LABELS, "outcome"), registry=registry)
        self.spawn_failures = Counter("kanban_dispatcher_spawn_failures", "Workers that did "
                                      "not start.", registry=registry)
        self.leases_expired = Counter("kanban_dispatcher_leases_expired", "Expired leases "
                                      "this dispatcher rescued.", registry=registry)
        self.breaker_trips = Counter("kanban_dispatcher_breaker_trips", "Times the circuit "
                                     "breaker opened.", registry=registry)
        self.dispatch_latency = Histogram(
            "kanban_dispatcher_dispatch_latency_seconds", "From the claim to the worker's "
            "process started.", registry=registry, buckets=LATENCY_BUCKETS)
        self.run_duration = Histogram(
            "kanban_dispatcher_run_duration_seconds", "From a worker's start to its exit, by "
            "the run's outcome.", ("outcome",), registry=registry, buckets=DURATION_BUCKETS)
        Gauge("kanban_dispatcher_workers_running", "Workers running now.",
              registry=registry).set_function(lambda: len(dispatcher.workers))
        Gauge("kanban_dispatcher_max_workers", "Workers at most.",
              registry=registry).set(dispatcher.max_workers)
        Gauge("kanban_dispatcher_breaker_open", "1 while the circuit breaker is open (not "
              "claiming).", registry=registry).set_function(
                  lambda: 1.0 if dispatcher.breaker.is_open else 0.0)
        ProcessCollector(registry=registry)
        registry.register(BoardCollector(dispatcher.kb.db))

    def hear(self, fields: dict[str, Any]) -> None:
        """One dispatcher event (kanban.dispatcher.logs listener); counting never stops the
        loop that reported it."""
        try:
            self._count(fields)
        except (TypeError, ValueError) as exc:
            logs.log.debug("metrics: event not counted (%s): %r", exc, fields)

    def _count(self, fields: dict[str, Any]) -> None:
        kind = fields.get("kind")
        card = [str(fields.get(name, "")) for name in CARD_LABELS]
        if kind == "claimed":
            self.claims.labels(*card).inc()
            if "dispatch_s" in fields:
                self.dispatch_latency.observe(float(fields["dispatch_s"]))
        elif kind == "finished":
            outcome = str(fields.get("outcome", ""))
            self.finished.labels(*card, outcome).inc()
            self.run_duration.labels(outcome).observe(float(fields.get("duration_s", 0.0)))
            if fields.get("status") == "ready" and outcome not in NOT_RETRIES:
                self.retries.labels(*card, outcome).inc()
        elif kind == "spawn_failed":
            self.spawn_failures.inc()
        elif kind == "lease_expired":
            self.leases_expired.inc()
        elif kind == "breaker_open":
            self.breaker_trips.inc()


class _Server(WSGIServer):
    """One request at a time, on the address family of the host it was given."""

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)


class _QuietHandler(WSGIRequestHandler):
    timeout = 5.0  # seconds a client may take to send its request

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every few seconds is not news


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class MetricsServer:
    """The HTTP endpoint and the listener feeding it; `close` undoes both."""

    metrics: DispatcherMetrics
    server: WSGIServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        host, port = str(self.server.server_address[0]), int(self.server.server_address[1])
        return f"http://[{host}]:{port}/metrics" if ":" in host else \
            f"http://{host}:{port}/metrics"

    def close(self) -> None:
        if self.metrics.hear in logs.listeners:
            logs.listeners.remove(self.metrics.hear)
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_metrics(dispatcher: Dispatcher, port: int,
                  host: str = DEFAULT_HOST) -> MetricsServer:
    """Listen on host:port (0: any free port) and count this dispatcher's events."""
    disable_created_metrics()  # no `_created` twin of every counter: half the series
    metrics = DispatcherMetrics(dispatcher)
    try:
        server = make_server(host.strip("[]"), port, make_wsgi_app(metrics.registry),
                             server_class=_Server, handler_class=_QuietHandler)
    except (OSError, ValueError) as exc:  # in use, not this host's address, not an address
        why = getattr(exc, "strerror", None) or exc
        raise UsageError(f"cannot serve metrics on {host}:{port}: {why}") from None
    thread = threading.Thread(target=server.serve_forever, name="kanban-metrics",
                              daemon=True)
    thread.start()
    logs.listeners.append(metrics.hear)
    return MetricsServer(metrics, server, thread)
