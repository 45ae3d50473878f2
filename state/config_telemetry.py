"""`[telemetry]` in config.toml: where traces of card runs go (docs/traces.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kanban.state.config_keys import setting
from kanban.state.config_values import build
from kanban.state.errors import ConfigError

URL = r"https?://[^\s/]+(/\S*)?"


@dataclass(frozen=True)
class TelemetrySettings:
    """`[telemetry]`: traces of card runs, model and tool calls, sent over OTLP/HTTP (the
    `otel` extra); off unless an endpoint is set here or in OTEL_EXPORTER_OTLP_ENDPOINT."""

    endpoint: str | None = setting(None, "The collector's OTLP/HTTP base URL (spans go to "
                                   "its /v1/traces); wins over OTEL_EXPORTER_OTLP_ENDPOINT.",
                                   choices=("http://HOST:PORT", "https://HOST/PATH"),
                                   pattern=URL)
    capture_content: bool = setting(False, "Also record prompts, answers, tool arguments and "
                                    "results in spans (credentials are still masked).")
    service_name: str = setting("kanban", "The service.name traces are filed under "
                                "(OTEL_SERVICE_NAME wins).")
    enabled: bool = setting(True, "false: no traces from this board, whatever the "
                            "environment says.")


def parse_telemetry(table: Any, where: str) -> TelemetrySettings:
    settings: TelemetrySettings = build(TelemetrySettings, table, where)
    if not settings.service_name.strip():
        raise ConfigError(f"{where}.service_name must not be empty")
    return settings
