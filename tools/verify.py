"""A `verify:CMD` review gate: the command run in the card's workspace; exit 0 passes.

The worker runs it under its lease, after its agent completed and before the card leaves
`running`, so a worker that dies while verifying is rescued like any other.
"""

from __future__ import annotations

import math

from kanban.review import Verdict
from kanban.tools.runner import CommandSpec, Rlimits, head_tail
from kanban.tools.workbench import Workbench

FEEDBACK_CHARS = 6_000  # of the command's output, head and tail, in the next attempt's prompt
MIN_TIME_S = 1.0


def verify(command: str, bench: Workbench) -> Verdict:
    """Run the gate's command in the workspace (no approval asked: the person who set the
    gate wrote it); its output, cut to head and tail, is the feedback."""
    timeout = bench.profile.command_timeout_s
    remaining = bench.remaining_s()
    if remaining is not None:
        if remaining < MIN_TIME_S:
            return Verdict(False, f"verify `{command}` was not run: the card had no time left")
        timeout = min(timeout, remaining - MIN_TIME_S / 2)
    spec = CommandSpec.shell(command, cwd=bench.workspace, env=bench.env, timeout_s=timeout,
                             output_path=bench.output_path("verify"),
                             rlimits=Rlimits(cpu_s=max(1, math.ceil(timeout)) + 5))
    result = bench.runner.run(spec)
    if result.error:
        bench.drop_output(result.output_path)
        return Verdict(False, f"verify `{command}` could not start: {result.error}")
    output, cut = head_tail(result.output_path, FEEDBACK_CHARS)
    if cut:  # the whole output stays in the workspace, as before, through the wall
        output = output.replace(str(result.output_path), bench.keep_output(result.output_path))
    else:
        bench.drop_output(result.output_path)
    if result.exit_code == 0 and not result.timed_out and not result.cancelled:
        return Verdict(True, f"verify `{command}` passed")
    if result.timed_out:
        status = f"timed out after {result.duration_s:.0f}s"
    elif result.cancelled:
        status = "was cancelled"
    else:
        status = f"failed with exit code {result.exit_code}"
    return Verdict(False, f"verify `{command}` {status}; its output:\n{output.strip()}")
