"""Structured logs: one JSON object per line (``--log-format json``).

Each line has ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, ``pid``, the
exception text when there is one, and every ``extra={...}`` field the call passed
(``run_id``, ``effect_id``, ...). A line logged while a run is executing, by oncegraph
or by the user's own node or tool code, also carries where it was logged: ``run_id``,
``thread_id``, ``node`` and ``step`` inside a task, and ``effect_id`` and
``effect_type`` inside a tool or ``effect(...)`` call (an ``extra`` field of the same
name wins). Values that are not JSON are written as strings.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

_STANDARD = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys() | {"message", "asctime"}
)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s"


class JsonFormatter(logging.Formatter):
    """A :class:`logging.Formatter` writing each record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        out.update(_ambient())
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def _nowhere() -> dict[str, Any]:
    return {}


#: Where a line is logged: the ids of the task and the effect it is logged in (none
#: outside a run). The runtime, which knows the running task, installs it
#: (:func:`locate_with`, from :mod:`oncegraph.runtime.context`).
_ambient: Callable[[], dict[str, Any]] = _nowhere


def locate_with(where: Callable[[], dict[str, Any]]) -> None:
    """Install what tells a log line where it was logged (see :data:`_ambient`)."""
    global _ambient
    _ambient = where


def configure_logging(fmt: str = "text", level: str | int = "INFO") -> None:
    """Send log records to stderr as ``text`` or ``json`` (replacing root handlers)."""
    if fmt not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)


__all__ = ["TEXT_FORMAT", "JsonFormatter", "configure_logging", "locate_with"]
