"""The dispatcher's log: one line per card event, as text or JSON, on stderr or a file.

Events carry their fields in `extra={"fields": {...}}`; the text form prints them as
`key=value` after the message, the JSON form as keys of one object per line.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kanban.textsafety import json_safe, visible

LOGGER = "kanban.dispatcher"
log = logging.getLogger(LOGGER)
LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG}
# Hear every event's fields whatever the log level (the metrics count them).
Listener = Callable[[dict[str, Any]], None]
listeners: list[Listener] = []


def event(message: str, level: int = logging.INFO, **fields: Any) -> None:
    """One card event: `message` for people, `fields` for machines."""
    for listener in listeners:
        listener(fields)
    log.log(level, message, extra={"fields": fields})


class TextFormatter(logging.Formatter):
    """`2025-03-30 14:02:11.123 +02:00 claimed #12 attempt 1 ...`: local time, labelled."""

    def format(self, record: logging.LogRecord) -> str:
        at = datetime.fromtimestamp(record.created).astimezone()
        offset = at.strftime("%z")
        stamp = f"{at.strftime('%Y-%m-%d %H:%M:%S')}.{int(record.msecs):03d} " \
                f"{offset[:3]}:{offset[3:]}"
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        return f"{stamp} {level}{visible(record.getMessage())}"  # errors quote model text


class JsonFormatter(logging.Formatter):
    """One object per line: at (UTC ISO 8601), level, message, then the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(), "message": record.getMessage(),
        }
        data.update(getattr(record, "fields", {}))
        return json_safe(json.dumps(data, default=str, ensure_ascii=False))


def configure(*, level: int = 1, fmt: str = "text", path: str | None = None,
              stream: Any = None) -> None:
    """Send the dispatcher's log to stderr (and `path`), replacing earlier handlers."""
    formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    handlers: list[logging.Handler] = [logging.StreamHandler(stream or sys.stderr)]
    if path:
        handlers.append(logging.FileHandler(path, encoding="utf-8"))
    for old in list(log.handlers):
        log.removeHandler(old)
        old.close()
    for handler in handlers:
        handler.setFormatter(formatter)
        log.addHandler(handler)
    log.setLevel(LEVELS.get(level, logging.INFO))
    log.propagate = False
