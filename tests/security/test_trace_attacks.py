"""Attacks on traces (issue 32): a collector's credentials and the model's keys must reach
neither the agent's commands nor the spans, even with content capture on."""

from __future__ import annotations

import json
import uuid

from tests.security.conftest import Attack, canary_leaks
from tests.support.llm_bodies import tool_results
from tests.support.llm_server import LLMServer, Reply, text_reply, tool_reply
from tests.support.otlp import OtlpReceiver, Span
from tests.support.procs import kanban

TERMINAL = 'toolsets = ["kanban", "terminal"]\napproval = "allow"\n'
SNOOP = "env; cat /proc/$PPID/environ 2>/dev/null | tr '\\0' '\\n'; echo snooped"


def _dumped(spans: list[Span]) -> str:
    return json.dumps([[s.name, s.attributes] for s in spans])


def test_the_collectors_token_is_the_exporters_alone(attack: Attack) -> None:
    token = "otlp-canary-" + uuid.uuid4().hex
    attack.configure(TERMINAL)
    with OtlpReceiver() as receiver:
        extra = {**receiver.env(), "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {token}",
                 "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
        card, seen = attack.run([("terminal", {"command": SNOOP})], env=extra)
        spans = receiver.wait_for(lambda got: any(s.name.startswith("invoke_agent")
                                                  for s in got), what="the run's span")
    assert attack.card(card)[0] == "done"
    assert any("snooped" in result for result in seen)  # the command did run
    assert {s.headers.get("authorization") for s in spans} == {f"Bearer {token}"}
    # the command saw neither the collector's token nor the model's key...
    assert not [r for r in seen if token in r or attack.canaries.openai_key in r]
    assert not canary_leaks([token], [attack.board.home])
    attack.assert_contained()
    # ...and with content captured, the spans hold the command's output but no credential
    dumped = _dumped(spans)
    assert "snooped" in dumped
    for secret in (token, *attack.canaries.values):
        assert secret not in dumped


def test_a_key_the_provider_echoes_is_masked_in_captured_content(attack: Attack) -> None:
    attack.configure('toolsets = ["kanban"]')
    key = attack.canaries.openai_key

    def echoing(body: dict[str, object]) -> Reply:  # a hostile provider repeating the key
        if tool_results(body):
            return text_reply(f"done, by the way your key is {key}")
        return tool_reply(("kanban_complete", {"summary": f"my key: {key}"}))

    card = attack.board.add("echo", profile=attack.profile)
    with LLMServer(responder=echoing) as server, OtlpReceiver() as receiver:
        env = attack.canaries.env(server, {
            **receiver.env(), "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
        kanban(attack.board.path, "dispatch", "--once", env=env, check=False)
        spans = receiver.wait_for(lambda got: any(s.name.startswith("invoke_agent")
                                                  for s in got), what="the run's span")
    assert attack.card(card)[0] == "done"
    (complete,) = [s for s in spans if s.attr("gen_ai.tool.name") == "kanban_complete"]
    assert "[redacted]" in complete.attr("gen_ai.tool.call.arguments")
    assert key not in _dumped(spans)
