"""The command-approval policy: a dangerous command runs, is refused, or waits for a person.

`gate(bench, command)` answers None (go ahead) or the tool result to return instead. The
profile's `approval` decides: `allow` runs it, `deny` refuses it naming the rule, `ask`
blocks the card with the exact command (see kanban.approvals). A person's earlier decision
on exactly this command for this card wins over the mode.
"""

from __future__ import annotations

from kanban import approvals
from kanban.agent.types import ToolResult
from kanban.events import record_event
from kanban.tools.policy import find_danger
from kanban.tools.workbench import Workbench


def gate(bench: Workbench, command: str) -> ToolResult | None:
    rule = find_danger(command, bench.profile.dangerous_patterns)
    if rule is None:
        return None
    scope = bench.scope
    if scope is None:  # tools used outside a worker: only the mode applies
        if bench.approval == "allow":
            return None
        return _refused(command, rule, "")
    with scope.kb.db.read() as conn:
        earlier = approvals.decision_for(conn, scope.card_id, command)
    if earlier is not None and earlier.decision == approvals.APPROVED:
        _event(bench, "command_allowed", command, rule, approved_by=earlier.decided_by)
        return None
    if earlier is not None:
        because = f" ({earlier.reason})" if earlier.reason else ""
        return ToolResult(f"not run: {earlier.decided_by or 'a person'} denied this exact "
                          f"command{because}. Do not try it again; find another way or "
                          "explain in your summary why you could not.", is_error=True)
    if bench.approval == "allow":
        _event(bench, "command_allowed", command, rule, mode="allow")
        return None
    if bench.approval == "deny":
        _event(bench, "command_refused", command, rule, mode="deny")
        return _refused(command, rule, " Dangerous commands are refused for this card.")
    scope.finishing = True  # the card leaves `running`: losing its lease is expected now
    try:
        with scope.fenced() as conn:
            approvals.request(conn, scope.card_id, command, rule, run_id=scope.run_id,
                              actor=scope.actor, now=scope.kb.clock())
    except BaseException:
        scope.finishing = False
        raise
    scope.finished = "blocked"
    return ToolResult(f"not run yet: the command matches '{rule}' and needs a person's "
                      "approval. Your card is blocked until they decide; the next attempt "
                      "will know the decision.", ends_run=True)


def _refused(command: str, rule: str, why: str) -> ToolResult:
    return ToolResult(f"refused: the command matches the dangerous-command rule '{rule}'."
                      f"{why} Do it another way, inside your workspace.", is_error=True)


def _event(bench: Workbench, kind: str, command: str, rule: str, **data: object) -> None:
    scope = bench.scope
    assert scope is not None
    with scope.fenced() as conn:
        record_event(conn, board=scope.board, card_id=scope.card_id, run_id=scope.run_id,
                     kind=kind, actor=scope.actor.name, at=scope.kb.clock(), command=command,
                     pattern=rule, **data)
