"""The command-approval policy: a command the gate does not judge safe runs, is refused, or
waits for a person.

`gate(bench, command)` answers None (go ahead) or the tool result to return instead. Safe
commands always run. Unknown and dangerous ones (tools.policy) obey the resolved
`approval`: `allow` runs them, `deny` refuses them naming the rule or reason, `ask` blocks
the card with the exact command (see kanban.approvals). A person's earlier decision on
exactly this command for this card wins over the mode.
"""

from __future__ import annotations

from kanban import approvals
from kanban.agent.types import ToolResult
from kanban.events import record_event
from kanban.tools.policy import Verdict, judge
from kanban.tools.workbench import Workbench

UNKNOWN_PREFIX = "unknown command: "


def rule_of(verdict: Verdict) -> str:
    """What an approval request, an event and a person see: the rule, or why unknown."""
    return verdict.why if verdict.dangerous else UNKNOWN_PREFIX + verdict.why


def gate(bench: Workbench, command: str) -> ToolResult | None:
    verdict = judge(command, bench.profile.dangerous_patterns, workspace=bench.workspace,
                    own_pids=getattr(bench.runner, "own_pids", False))
    if verdict.safe:
        return None
    rule = rule_of(verdict)
    scope = bench.scope
    if scope is None:  # tools used outside a worker: only the mode applies
        if bench.approval == "allow":
            return None
        return _refused(verdict, "")
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
        return _refused(verdict, " Such commands are refused for this card.")
    return _ask(bench, command, verdict)


def _ask(bench: Workbench, command: str, verdict: Verdict) -> ToolResult:
    scope = bench.scope
    assert scope is not None
    scope.finishing = True  # the card leaves `running`: losing its lease is expected now
    try:
        with scope.fenced() as conn:
            approvals.request(conn, scope.card_id, command, rule_of(verdict),
                              run_id=scope.run_id, actor=scope.actor, now=scope.kb.clock())
    except BaseException:
        scope.finishing = False
        raise
    scope.finished = "blocked"
    what = (f"matches '{verdict.why}'" if verdict.dangerous else
            f"cannot be judged from its text ({verdict.why})")
    return ToolResult(f"not run yet: the command {what} and needs a person's "
                      "approval. Your card is blocked until they decide; the next attempt "
                      "will know the decision.", ends_run=True)


def _refused(verdict: Verdict, why: str) -> ToolResult:
    if verdict.dangerous:
        return ToolResult(f"refused: the command matches the dangerous-command rule "
                          f"'{verdict.why}'.{why} Do it another way, inside your workspace.",
                          is_error=True)
    return ToolResult(f"refused: the command cannot be judged safe from its text "
                      f"({verdict.why}).{why} Use plain commands on files in your workspace "
                      "(write a script file and run it rather than a one-liner).",
                      is_error=True)


def _event(bench: Workbench, kind: str, command: str, rule: str, **data: object) -> None:
    scope = bench.scope
    assert scope is not None
    with scope.fenced() as conn:
        record_event(conn, board=scope.board, card_id=scope.card_id, run_id=scope.run_id,
                     kind=kind, actor=scope.actor.name, at=scope.kb.clock(), command=command,
                     pattern=rule, **data)
