"""The model gateway: a worker's calls made by another process's adapters, over a socket
handed to it per call, answered exactly as the adapter here would answer them; and where
the gateway is gone, before or in the middle of a call, the worker calls by itself."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from typing import Any

import pytest

from kanban.agent import gateway
from kanban.agent.errors import FatalModelError, ModelError
from kanban.agent.fallback import call_model
from kanban.agent.interrupt import Interrupt, Interrupted
from kanban.agent.model import resolve_model
from kanban.agent.retry import RetryPolicy
from kanban.agent.types import (
    Message,
    Model,
    ModelResponse,
    StreamEvent,
    StreamRestart,
    TextDelta,
    ToolSpec,
)
from tests.support.llm_server import (
    LLMServer,
    model_not_found,
    rate_limited,
    text_reply,
    tool_reply,
)
from tests.support.procs import wait_until

SPECS = ["openai:m", "openai-responses:m", "anthropic:m"]
TOOL = ToolSpec("lookup", "finds a thing", {"type": "object",
                                            "properties": {"q": {"type": "string"}}})
FAST = RetryPolicy(base_delay=0.01, max_delay=0.02)


def model_threads() -> int:
    return sum(t.name == "gateway-call" and t.is_alive() for t in threading.enumerate())


@pytest.fixture
def served() -> Iterator[socket.socket]:
    """A gateway serving on a thread of this process, as a forked worker would reach it."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    thread = threading.Thread(target=gateway.serve, args=(theirs,), daemon=True)
    thread.start()
    gateway._intake = ours
    try:
        yield ours
    finally:
        gateway.forget()
        thread.join(5)
        theirs.close()
    assert not thread.is_alive()  # every way in closed: the gateway ended


def through(server: LLMServer, spec: str, **kwargs: Any) -> Model:
    model = resolve_model(spec, env=server.env(), retry=FAST, **kwargs)
    assert isinstance(model, gateway.GatewayModel)
    return model


def direct(server: LLMServer, spec: str) -> Model:
    saved, gateway._intake = gateway._intake, None
    try:
        return resolve_model(spec, env=server.env(), retry=FAST)
    finally:
        gateway._intake = saved


def unnamed(response: ModelResponse) -> ModelResponse:
    """The response but its tool calls' ids (the server numbers each call it answers)."""
    return replace(response, tool_calls=tuple(replace(c, id="") for c in response.tool_calls))


def call(model: Model, prompt: str = "hi") -> tuple[Any, list[StreamEvent]]:
    events: list[StreamEvent] = []
    stream = model.stream  # type: ignore[attr-defined]
    return stream([Message("user", prompt)], [TOOL], events.append), events


@pytest.mark.parametrize("spec", SPECS)
def test_an_answer_through_the_gateway_is_the_adapters_own(served: socket.socket,
                                                           spec: str) -> None:
    reply = tool_reply(("lookup", {"q": "x"}), text="looking", chunk_chars=3)
    with LLMServer() as server:
        server.enqueue(reply, reply)
        answer, events = call(through(server, spec))
        same, same_events = call(direct(server, spec))
    assert unnamed(answer) == unnamed(same) and events == same_events
    assert answer.text == "looking" and answer.tool_calls[0].name == "lookup"
    assert answer.source == spec and answer.usage.output_tokens > 0
    assert [e for e in events if isinstance(e, TextDelta)][:2] == [TextDelta("loo"),
                                                                   TextDelta("kin")]


def test_a_retried_429_and_a_fatal_error_come_back_as_from_the_adapter(
        served: socket.socket) -> None:
    with LLMServer() as server:
        server.enqueue(rate_limited(retry_after="0"), text_reply("after the 429"))
        answer, _ = call(through(server, "openai:m"))
        assert answer.text == "after the 429"
        server.enqueue(model_not_found("m"), model_not_found("m"))
        with pytest.raises(FatalModelError) as gone:
            call(through(server, "openai:m"))
        with pytest.raises(FatalModelError) as here:
            call(direct(server, "openai:m"))
    assert str(gone.value) == str(here.value) and "(at 127.0.0.1:" in str(gone.value)


def test_without_a_gateway_the_worker_calls_by_itself() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    theirs.close()  # the gateway died before the call
    gateway._intake = ours
    try:
        with LLMServer() as server:
            server.enqueue(text_reply("said here"), text_reply("and again"))
            model = through(server, "anthropic:m")
            assert call(model)[0].text == "said here"
            assert call(model)[0].text == "and again"
    finally:
        gateway.forget()


def fake_gateway(serve_one: Callable[[socket.socket], None]) -> socket.socket:
    """This process's way to a gateway that serves each call with `serve_one`."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

    def loop() -> None:
        with theirs:
            while True:
                data, fds, _, _ = socket.recv_fds(theirs, 16, 1)
                if not fds:
                    return
                with socket.socket(fileno=fds[0]) as conn:
                    serve_one(conn)

    threading.Thread(target=loop, daemon=True).start()
    return ours


def test_a_gateway_that_dies_mid_answer_is_told_and_the_call_made_here() -> None:
    def half(conn: socket.socket) -> None:
        conn.makefile("rb").readline()
        conn.sendall(json.dumps({"text": "half an ans"}).encode() + b"\n")  # then it dies

    gateway._intake = fake_gateway(half)
    try:
        with LLMServer() as server:
            server.enqueue(text_reply("whole answer"))
            answer, events = call(through(server, "openai:m"))
    finally:
        gateway.forget()
    assert answer.text == "whole answer"
    assert events[0] == TextDelta("half an ans")
    assert events[1] == StreamRestart("the model gateway ended mid-answer")
    assert "".join(e.text for e in events[2:] if isinstance(e, TextDelta)) == "whole answer"


def test_what_the_gateway_sends_cannot_be_more_than_an_answer() -> None:
    """An error frame naming no error class of ours is a plain ModelError, never another
    exception type (the frame's name is not looked up anywhere else)."""
    def odd(conn: socket.socket) -> None:
        conn.makefile("rb").readline()
        conn.sendall(json.dumps({"error": "SystemExit", "message": "bye"}).encode() + b"\n")

    gateway._intake = fake_gateway(odd)
    try:
        with LLMServer() as server, pytest.raises(ModelError) as raised:
            call(through(server, "openai:m"))
    finally:
        gateway.forget()
    assert type(raised.value) is ModelError and str(raised.value) == "bye"


def test_a_worker_that_hangs_up_ends_the_call_in_the_gateway(served: socket.socket) -> None:
    with LLMServer() as server:
        server.enqueue(text_reply("x" * 400, chunk_chars=4, chunk_delay=0.05))
        model = through(server, "openai:m")

        def stop(event: StreamEvent) -> None:
            raise KeyboardInterrupt  # the worker's run ends in the middle of the answer

        with pytest.raises(KeyboardInterrupt):
            model.stream([Message("user", "hi")], [], stop)  # type: ignore[attr-defined]
        server.wait_for_abort(timeout=10)  # the gateway let go of the stream
        wait_until(lambda: model_threads() == 0, timeout=10, what="the call's thread ended")


def test_what_the_listener_raises_is_not_taken_for_a_gateway_gone(served: socket.socket
                                                                  ) -> None:
    """Only the gateway going away sends the call to the provider from here: an error of the
    worker's own listener ends the call, and the provider is asked once."""
    with LLMServer() as server:
        server.enqueue(text_reply("x" * 40, chunk_chars=4), text_reply("never"))

        seen: list[StreamEvent] = []

        def refuse(event: StreamEvent) -> None:
            seen.append(event)
            if len(seen) == 1:  # once: what follows would be taken quietly
                raise ValueError("the listener's own error")

        with pytest.raises(ValueError, match="listener's own"):
            through(server, "openai:m").stream(  # type: ignore[attr-defined]
                [Message("user", "hi")], [], refuse)
        assert len(server.requests) == 1 and server.pending == 1


def test_a_route_and_its_tools_cross_the_wire_whole() -> None:
    """The worker writes them out by hand (no copy of each schema per turn): every field of
    each is on the wire, and comes back equal."""
    route = gateway.Route.of("openai:m", ["k1", "k2"], base_url="http://h/v1", timeout=9.0,
                             max_tokens=100, reasoning="low", responses_api=True,
                             retry=RetryPolicy(max_retries=3))
    wire = json.loads(json.dumps(route.to_wire()))
    assert set(wire) == {f.name for f in fields(gateway.Route)}
    assert gateway.Route.from_wire(wire) == route
    tool = ToolSpec("t", "does", {"type": "object", "properties": {"a": {"type": "string"}}},
                    parallel=False, exclusive=True)
    sent = json.loads(gateway._compact([gateway._tool_wire(tool)]))
    assert set(sent[0]) == {f.name for f in fields(ToolSpec)}
    assert ToolSpec(**sent[0]) == tool


def test_a_run_stopped_mid_answer_hangs_up_with_no_thread_of_its_own(
        served: socket.socket) -> None:
    """Through the gateway the call runs on the run's own thread: the switch thrown from
    another one (the heartbeat's, on a cancelled card) hangs up, the gateway lets go of the
    stream, and the provider is not asked again from here."""
    with LLMServer() as server:
        server.enqueue(text_reply("x" * 400, chunk_chars=4, chunk_delay=0.05))
        model = through(server, "openai:m")
        switch = Interrupt()
        events: list[StreamEvent] = []

        def first_then_cancel(event: StreamEvent) -> None:
            events.append(event)
            if len(events) == 1:
                threading.Timer(0.05, switch.cancel, args=("card cancelled",)).start()

        def helpers() -> set[threading.Thread]:
            return {t for t in threading.enumerate() if t.name == "model-call"}

        earlier = helpers()  # an earlier test's may still be ending: none may begin now
        with pytest.raises(Interrupted, match="card cancelled"):
            switch.call(lambda: call_model(model, [Message("user", "hi")], [],
                                           first_then_cancel),
                        here=getattr(model, "interruptible", False))
        assert not helpers() - earlier
        assert switch._caller is None  # no helper thread was made for the call
        server.wait_for_abort(timeout=10)
        wait_until(lambda: model_threads() == 0, timeout=10, what="the call's thread ended")
        assert len(server.requests) == 1
