"""The `terminal` toolset: one `bash -c` command in the workspace, bounded and killable."""

from __future__ import annotations

import math
from typing import Any

from kanban.agent.types import ToolResult
from kanban.tools import budget, sandbox_watch
from kanban.tools.approval import gate
from kanban.tools.registry import ToolRegistry
from kanban.tools.runner import CommandResult, CommandSpec, Rlimits, head_tail
from kanban.tools.workbench import Workbench

TOOLSET = "terminal"
MAX_COMMAND = 20_000
MIN_TIME_S = 1.0


def terminal(args: dict[str, Any], bench: Workbench) -> ToolResult:
    command = args["command"]
    refusal = gate(bench, command)
    if refusal is not None:
        return refusal
    timeout = _timeout(args.get("timeout_s"), bench)
    if timeout is None:
        return ToolResult("not run: the card has no time left for a command", is_error=True)
    room = budget.command_room(bench)
    if room == 0:
        return budget.exceeded(bench, budget.over(bench) or "the card's workspace is full",
                               "not run")
    spec = CommandSpec.shell(command, cwd=bench.workspace, env=bench.env, timeout_s=timeout,
                             output_path=bench.output_path("terminal"),
                             rlimits=_limits(bench, timeout, room),
                             check=lambda: budget.over(bench))
    result = bench.runner.run(spec)
    described = describe(result, bench)
    past = result.stopped or budget.over(bench)
    if past is None:
        return described
    what = "the command was stopped" if result.stopped else "the command ended past the budget"
    advice = sandbox_watch.advice(result.stopped) or budget.SPACE_ADVICE
    blocked = budget.exceeded(bench, past, what, advice=advice)
    return ToolResult(f"{blocked.content}\n{described.content}", is_error=True,
                      ends_run=blocked.ends_run)


def _timeout(asked: float | None, bench: Workbench) -> float | None:
    """The command's time: asked or the profile's default, within the card's remaining time."""
    timeout = float(asked) if asked is not None else bench.profile.command_timeout_s
    remaining = bench.remaining_s()
    if remaining is not None:
        if remaining < MIN_TIME_S:
            return None
        timeout = min(timeout, remaining - MIN_TIME_S / 2)
    return timeout


def _limits(bench: Workbench, timeout: float, room: int) -> Rlimits:
    # CPU seconds cannot exceed wall seconds by much for one process group member; no file
    # may grow past what is left of the workspace's budget.
    return Rlimits(cpu_s=max(1, math.ceil(timeout)) + 5,
                   file_size_bytes=min(room, max(bench.profile.max_file_bytes, 1 << 30)))


def describe(result: CommandResult, bench: Workbench) -> ToolResult:
    """Exit code and output for the model; a long output keeps head and tail and stays
    whole in the workspace, a short one is not kept."""
    if result.error:
        bench.drop_output(result.output_path)
        return ToolResult(result.error, is_error=True)
    text, cut = head_tail(result.output_path, bench.profile.tool_result_chars)
    saved = ""
    if cut:  # the whole output goes to the workspace through the file tools' wall
        saved = bench.keep_output(result.output_path)
        text = text.replace(str(result.output_path), saved)
    else:
        bench.drop_output(result.output_path)
    if result.cancelled:
        status, error = "cancelled (the card was stopped)", True
    elif result.stopped:
        status, error = f"stopped: {result.stopped}", True
    elif result.timed_out:
        status, error = f"timed out after {result.duration_s:.0f}s and was killed", True
    else:
        status, error = f"exit code {result.exit_code}", False
    lines = [status, f"output ({result.output_bytes:,} bytes"
             + (f"; cut to head and tail, whole output in {saved}" if cut else "") + "):",
             text if text else "(no output)"]
    return ToolResult("\n".join(lines), is_error=error)


def register(registry: ToolRegistry) -> None:
    schema = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "maxLength": MAX_COMMAND},
            "timeout_s": {"type": "number", "minimum": 1, "maximum": 86_400},
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    registry.tool(
        # One command at a time: they share the workspace, and asking a person ends the run.
        "terminal", toolset=TOOLSET, parameters=schema, takes_context=True, parallel=False,
        description=("Run a bash command in your workspace (no input; stdout and stderr "
                     "together) and get its exit code and output. Commands that could do "
                     "damage outside the workspace may need a person's approval."),
    )(terminal)
