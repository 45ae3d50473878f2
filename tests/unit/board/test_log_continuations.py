"""Which of a resumed run's messages it inherited (kanban.readmodels.continuations)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from kanban.readmodels import Continuation, continuations
from kanban.records import MessageRecord, RunRecord

AT = datetime(2025, 1, 1, tzinfo=UTC)


def run(run_id: int) -> RunRecord:
    return RunRecord(run_id, 1, run_id, None, None, AT, None, None, None, None, None, None,
                     0, 0, 0)


def msg(run_id: int, seq: int, role: str, content: str) -> MessageRecord:
    return MessageRecord(run_id, seq, role, content, None, None, None, AT)


def test_the_copied_prefix_is_inherited_up_to_the_first_changed_message() -> None:
    first = [msg(1, 1, "system", "s"), msg(1, 2, "user", "task"),
             msg(1, 3, "assistant", "delegating"), msg(1, 4, "tool", "(pending)")]
    second = [*(msg(2, m.seq, m.role, m.content or "") for m in first[:3]),
              msg(2, 4, "tool", "children's report"), msg(2, 5, "assistant", "done")]
    runs = [(run(1), first), (run(2), second)]
    event = (2, json.dumps({"from_run": 1, "messages": 4}))
    assert continuations(runs, [event]) == {2: Continuation(1, 3)}


def test_an_event_naming_an_unknown_run_is_ignored() -> None:
    runs = [(run(1), [msg(1, 1, "user", "x")])]
    assert continuations(runs, [(1, json.dumps({"from_run": 9, "messages": 1})),
                                (7, json.dumps({"from_run": 1, "messages": 1}))]) == {}
