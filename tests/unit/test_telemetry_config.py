"""`[telemetry]` and the OTEL_* variables: whether a worker traces, where to, with what."""

from __future__ import annotations

import sys

import pytest

from kanban.state.config import Config
from kanban.state.config_parse import parse_config
from kanban.state.config_telemetry import TelemetrySettings
from kanban.state.errors import ConfigError
from kanban.worker import tracing
from kanban.worker.tracing import trace_settings


def test_off_by_default() -> None:
    assert Config().telemetry == TelemetrySettings()
    assert trace_settings(Config(), {}) is None
    assert trace_settings(Config(), {"OTEL_SERVICE_NAME": "x"}) is None


def test_the_table_is_parsed_and_checked() -> None:
    config = parse_config({"telemetry": {"endpoint": "http://127.0.0.1:4318",
                                         "capture_content": True, "service_name": "ops"}})
    assert config.telemetry == TelemetrySettings("http://127.0.0.1:4318", True, "ops")
    for table, says in [({"endpoint": "127.0.0.1:4318"}, "must be http://HOST:PORT or https://HOST/PATH"),
                        ({"capture_content": "yes"}, "true or false"),
                        ({"sample": 1}, "unknown key 'sample'"),
                        ({"service_name": " "}, "must not be empty")]:
        with pytest.raises(ConfigError, match=says):
            parse_config({"telemetry": table})


def test_the_standard_variable_turns_traces_on() -> None:
    settings = trace_settings(Config(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/",
                                         "OTEL_EXPORTER_OTLP_HEADERS":
                                             "Authorization=Basic%20YWJj, x-team = ops"})
    assert settings is not None
    assert settings.endpoint == "http://c:4318/v1/traces"
    assert dict(settings.headers) == {"authorization": "Basic YWJj", "x-team": "ops"}
    assert not settings.capture_content and settings.service_name == "kanban"


def test_a_signal_url_is_used_whole_and_config_wins_over_variables() -> None:
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/custom",
           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    assert trace_settings(Config(), env).endpoint == "http://t:4318/custom"  # type: ignore[union-attr]
    config = Config(telemetry=TelemetrySettings(endpoint="https://langfuse.local/api/public/otel"))
    settings = trace_settings(config, env)
    assert settings is not None
    assert settings.endpoint == "https://langfuse.local/api/public/otel/v1/traces"


def test_content_capture_and_switches() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
           "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
           "OTEL_SERVICE_NAME": "night-shift"}
    settings = trace_settings(Config(), env)
    assert settings is not None and settings.capture_content
    assert settings.service_name == "night-shift"
    assert trace_settings(Config(), {**env, "OTEL_SDK_DISABLED": "true"}) is None
    off = Config(telemetry=TelemetrySettings(enabled=False))
    assert trace_settings(off, env) is None


def test_without_the_extra_a_worker_says_so_and_runs_untraced(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "kanban.agent.otel", None)  # as if the SDK were absent
    assert tracing.start(Config(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) is None
    said = capsys.readouterr().err
    assert said.startswith("kanban worker: traces are off: the otel extra is not installed")
    assert "pip install 'kanban-workbench[otel]'" in said and said.count("\n") == 1
