"""Logging for log shippers: :class:`JsonFormatter` writes one JSON object per record,
with the run's context (``workflow_id``, ``workflow_type``, ``step``, and for activity
records ``activity`` and ``attempt``) as top-level fields.

Workflow records come from ``ctx.log`` (silent while replaying); activity records from
:func:`activity_log` or any logger whose handler has an :class:`ActivityLogFilter`
(both re-exported here from ``pyweft.engine.activity_scope``).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from pyweft.engine.steps.activity_scope import ActivityLogFilter, activity_log

CONTEXT_FIELDS = ("workflow_id", "workflow_type", "activity", "step", "attempt")
# Attributes every LogRecord has: not copied as extras.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}
_SECRET_FIELDS = frozenset({"attempt_token", "workflow_execution_token"})


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", <context>, <extras>, "exception"?}``.

    Extras given with ``extra={...}`` are included when JSON can hold them (else their
    ``repr``). Fencing tokens are left out unless ``include_tokens=True``.
    """

    def __init__(self, *, include_tokens: bool = False) -> None:
        super().__init__()
        self._include_tokens = include_tokens

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                out[name] = value
        for name, value in record.__dict__.items():
            if name in _STANDARD or name in out or name.startswith("_"):
                continue
            if name in _SECRET_FIELDS and not self._include_tokens:
                continue
            out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=repr)


__all__ = ["ActivityLogFilter", "JsonFormatter", "activity_log"]
