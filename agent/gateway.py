"""Model calls made for a forkserver's workers by one process of its own.

A worker that calls a provider through its SDK makes private copies of every page of the
SDK's objects it touches (CPython writes reference counts as it reads): about 6.5 MiB per
worker with the openai SDK (bench row 4.5), half of what a streaming worker costs. Here the
forkserver forks a gateway before any worker; each worker inherits one end of a
socketpair, and for each model call sends the gateway a new socket over it (SCM_RIGHTS):
the request goes down that socket as a line of JSON, and the answer comes back as lines
of JSON, streamed events first. Nothing has a name another process could connect to.

The gateway runs the same adapters (retries, key rotation, error translation) on a thread
per call. A worker whose gateway is gone makes its calls itself, as a cold worker does.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import kanban.agent.errors as errors
import kanban.agent.interrupt as interrupt
from kanban.agent.adapters import ModelOptions, build_direct
from kanban.agent.errors import ModelError
from kanban.agent.retry import RetryPolicy
from kanban.agent.types import (
    Message,
    Model,
    ModelResponse,
    OnEvent,
    ReasoningData,
    ReasoningDelta,
    StreamEvent,
    StreamRestart,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from kanban.tools.procctl import name_process

# The errors a call may end with, by name (anything else arrives as a ModelError).
_ERRORS: dict[str, type[ModelError]] = {
    cls.__name__: cls for cls in (errors.ModelError, errors.FatalModelError,
                                  errors.TransientModelError, errors.OutageError,
                                  errors.ContextOverflowError)}
_RETRY_FIELDS = ("max_retries", "base_delay", "max_delay", "max_retry_after",
                 "hand_over_outages")

NAME = "kanban-gateway"  # in ps and /proc/PID/comm
_intake: socket.socket | None = None  # this process's way to the gateway (a forked worker)


@dataclass(frozen=True)
class Route:
    """What the gateway needs to build a worker's model: `resolve_model`'s arguments."""

    spec: str
    keys: tuple[str, ...]
    base_url: str | None
    timeout: float
    max_tokens: int | None
    reasoning: str | None
    responses_api: bool
    retry: tuple[tuple[str, Any], ...]  # RetryPolicy's fields but its sleep and jitter

    @classmethod
    def of(cls, spec: str, keys: Sequence[str], *, base_url: str | None, timeout: float,
           max_tokens: int | None, reasoning: str | None, responses_api: bool,
           retry: RetryPolicy | None) -> Route:
        policy = retry or RetryPolicy()
        return cls(spec, tuple(keys), base_url, timeout, max_tokens, reasoning, responses_api,
                   tuple((name, getattr(policy, name)) for name in _RETRY_FIELDS))

    def to_wire(self) -> dict[str, Any]:
        return {"spec": self.spec, "keys": list(self.keys), "base_url": self.base_url,
                "timeout": self.timeout, "max_tokens": self.max_tokens,
                "reasoning": self.reasoning, "responses_api": self.responses_api,
                "retry": [list(pair) for pair in self.retry]}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Route:
        return cls(**{**data, "keys": tuple(data["keys"]),
                      "retry": tuple((str(k), v) for k, v in data["retry"])})


# -- in the forkserver --------------------------------------------------------------------

def open_gateway(fork: Callable[[Callable[[], None]], int]) -> int | None:
    """Fork the gateway (with `fork`, which must not return in the child) and keep this
    process's end for the workers it forks later; its pid, None where it could not start."""
    global _intake
    try:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except OSError:
        return None

    def child() -> None:
        forget()  # a gateway that ended: its way in closes with the forkserver's
        ours.close()
        name_process(NAME)
        try:
            serve(theirs)
        finally:
            os._exit(0)

    try:
        pid = fork(child)
    except OSError:
        ours.close()
        theirs.close()
        return None
    theirs.close()
    old, _intake = _intake, ours
    if old is not None:
        old.close()  # a gateway that ended: workers forked from now on use the new one
    return pid


def intake_fd() -> int | None:
    """The descriptor a forked worker must keep (None: no gateway)."""
    return _intake.fileno() if _intake is not None else None


def forget() -> None:
    """No gateway here any more (a process that must not use the forkserver's)."""
    global _intake
    if _intake is not None:
        _intake.close()
        _intake = None


# -- in the gateway -----------------------------------------------------------------------

def serve(intake: socket.socket) -> None:
    """Take calls until every process that could send one has gone."""
    models: dict[Route, Model] = {}
    lock = threading.Lock()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(intake, 16, 1)
        except InterruptedError:
            continue
        if not data and not fds:
            return
        for fd in fds:
            call = socket.socket(fileno=fd)
            threading.Thread(target=_serve_call, args=(call, models, lock), daemon=True,
                             name="gateway-call").start()


class _WorkerGone(Exception):
    """The worker closed its end (interrupted, or it died): the call is abandoned."""


def _serve_call(call: socket.socket, models: dict[Route, Model],
                lock: threading.Lock) -> None:
    with call, call.makefile("rb") as reader:
        line = reader.readline()
        if not line:
            return

        def send(frame: dict[str, Any]) -> None:
            try:
                call.sendall(json.dumps(frame, separators=(",", ":")).encode() + b"\n")
            except OSError:
                raise _WorkerGone from None

        try:
            request = json.loads(line)
            route = Route.from_wire(request["route"])
            with lock:
                model = models.get(route)
                if model is None:
                    model = models[route] = _build(route)
            messages = [Message.from_dict(m) for m in request["messages"]]
            tools = [ToolSpec(**t) for t in request["tools"]]
            stream = getattr(model, "stream", None)
            response = (stream(messages, tools, lambda event: send(_event_frame(event)))
                        if stream is not None else model.complete(messages, tools))
        except _WorkerGone:
            return
        except ModelError as exc:
            with contextlib.suppress(_WorkerGone):
                send({"error": type(exc).__name__, "message": exc.message})
            return
        except Exception as exc:  # noqa: BLE001 - the worker is told, the gateway goes on
            with contextlib.suppress(_WorkerGone):
                send({"error": "ModelError",
                      "message": f"the model gateway failed: {type(exc).__name__}: {exc}"})
            return
        with contextlib.suppress(_WorkerGone):
            send({"response": _response_frame(response)})


def _build(route: Route) -> Model:
    options = ModelOptions(base_url=route.base_url, timeout=route.timeout,
                           retry=RetryPolicy(**dict(route.retry)), max_tokens=route.max_tokens,
                           reasoning=route.reasoning, responses_api=route.responses_api)
    return build_direct(route.spec, options, list(route.keys))


def _event_frame(event: StreamEvent) -> dict[str, Any]:
    if isinstance(event, TextDelta):
        return {"text": event.text}
    if isinstance(event, ReasoningDelta):
        return {"reasoning": event.text}
    if isinstance(event, ToolCallDelta):
        return {"call": [event.index, event.name, event.arguments]}
    return {"restart": event.reason}


def _response_frame(response: ModelResponse) -> dict[str, Any]:
    return {"text": response.text, "tool_calls": [c.to_dict() for c in response.tool_calls],
            "usage": response.usage.to_dict(), "stop_reason": response.stop_reason,
            "model": response.model, "reasoning": response.reasoning,
            "reasoning_data": response.reasoning_data.to_dict()
            if response.reasoning_data is not None else None,
            "source": response.source}


# -- in a worker --------------------------------------------------------------------------

def available() -> bool:
    """Whether this process can send its model calls to a gateway."""
    return _intake is not None


class GatewayModel:
    """A `Model` whose calls the gateway makes; where the gateway is gone (or goes in the
    middle of a call), the calls are made here by `direct()`'s model instead."""

    def __init__(self, route: Route, name: str, direct: Callable[[], Model]) -> None:
        self.route = route
        self.name = name
        self._direct_factory = direct
        self._direct: Model | None = None
        self._route_json = _compact(route.to_wire())
        self._tools: tuple[Sequence[ToolSpec], str] | None = None  # the last tools, as JSON

    def _tools_json(self, tools: Sequence[ToolSpec]) -> str:
        """The tools as JSON; a run's turns offer the same ones, written out once."""
        if self._tools is None or self._tools[0] is not tools:
            self._tools = tools, _compact([_tool_wire(t) for t in tools])
        return self._tools[1]

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        return self.stream(messages, tools, lambda event: None)

    # A call through the gateway stops when the run's switch is thrown (it hangs up): the
    # run need not keep a thread to make it on (kanban.agent.interrupt).
    interruptible = True

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec],
               on_event: OnEvent) -> ModelResponse:
        switch = interrupt.current()
        if self._direct is None:
            call = _open_call()
            if call is not None:
                with call:
                    forget = switch.watch(partial(_hang_up, call)) if switch else _nothing
                    try:
                        answer = self._through(call, messages, tools, on_event)
                    finally:
                        forget()
                if answer is not None:
                    return answer
                if switch is not None:
                    switch.check()  # it hung up because the run was stopped
            self._direct = self._direct_factory()
        if switch is not None:  # an SDK's read cannot be stopped from here: on a thread
            return switch.call(partial(self._call_direct, messages, tools, on_event))
        return self._call_direct(messages, tools, on_event)

    def _call_direct(self, messages: Sequence[Message], tools: Sequence[ToolSpec],
                     on_event: OnEvent) -> ModelResponse:
        assert self._direct is not None
        stream = getattr(self._direct, "stream", None)
        if stream is None:
            return self._direct.complete(messages, tools)
        response: ModelResponse = stream(messages, tools, on_event)
        return response

    def _through(self, call: socket.socket, messages: Sequence[Message],
                 tools: Sequence[ToolSpec], on_event: OnEvent) -> ModelResponse | None:
        """The gateway's answer; None when it went away first (the caller calls directly)."""
        messages_json = _compact([m.to_dict() for m in messages])
        request = (f'{{"route":{self._route_json},"messages":{messages_json},'
                   f'"tools":{self._tools_json(tools)}}}\n')
        heard = False
        try:
            call.sendall(request.encode())
            reader = call.makefile("rb")
        except OSError:
            return None
        with reader:
            while (frame := _next_frame(reader)) is not None:
                if "response" in frame:
                    return _response(frame["response"])
                if "error" in frame:
                    raise _ERRORS.get(frame["error"], ModelError)(str(frame["message"]))
                heard = True
                on_event(_event(frame))  # what the listener raises is the caller's
        if heard:  # what was streamed is forgotten: the call is made again, here
            on_event(StreamRestart("the model gateway ended mid-answer"))
        return None

    def close(self) -> None:
        close = getattr(self._direct, "close", None)
        if close is not None:
            close()


def _hang_up(call: socket.socket) -> None:
    """From the thread throwing the run's switch: the read waiting on `call` ends (and the
    gateway, seeing the worker gone, ends the call)."""
    with contextlib.suppress(OSError):
        call.shutdown(socket.SHUT_RDWR)


def _nothing() -> None:
    pass


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _tool_wire(tool: ToolSpec) -> dict[str, Any]:
    """As `asdict` would give it, without copying the schema (json writes it as it is)."""
    return {"name": tool.name, "description": tool.description,
            "parameters": tool.parameters, "parallel": tool.parallel,
            "exclusive": tool.exclusive}


def _open_call() -> socket.socket | None:
    """A new socket whose other end the gateway now serves; None without a gateway."""
    intake = _intake
    if intake is None:
        return None
    try:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        socket.send_fds(intake, [b"c"], [theirs.fileno()])
    except OSError:
        ours.close()
        return None
    finally:
        theirs.close()
    return ours


def _next_frame(reader: Any) -> dict[str, Any] | None:
    """The gateway's next line; None once it has gone (its end closed, or a broken line)."""
    try:
        line = reader.readline()
        return dict(json.loads(line)) if line else None
    except (OSError, ValueError):
        return None


def _event(frame: dict[str, Any]) -> StreamEvent:
    if "text" in frame:
        return TextDelta(str(frame["text"]))
    if "reasoning" in frame:
        return ReasoningDelta(str(frame["reasoning"]))
    if "call" in frame:
        index, name, arguments = frame["call"]
        return ToolCallDelta(int(index), name, str(arguments))
    return StreamRestart(str(frame.get("restart", "")))


def _response(data: dict[str, Any]) -> ModelResponse:
    reasoning_data = data.get("reasoning_data")
    return ModelResponse(
        text=data.get("text"),
        tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
        usage=Usage(**data.get("usage") or {}),
        stop_reason=str(data.get("stop_reason") or "stop"),
        model=str(data.get("model") or ""),
        reasoning=data.get("reasoning"),
        reasoning_data=ReasoningData.from_dict(reasoning_data) if reasoning_data else None,
        source=str(data.get("source") or ""),
    )

