"""Which activity attempt is running now, for log records and for the activity's own code.

The engine sets a context variable around each activity attempt; it follows
the attempt into ``async`` code and, copied explicitly, into the worker thread
of a plain ``def`` activity. Two ways to use it:

- :func:`activity_log` is a logger (like ``ctx.log`` for workflows) whose
  records carry ``workflow_id``, ``workflow_type``, ``activity``, ``step`` and
  ``attempt`` as extras;
- :class:`ActivityLogFilter` adds the same attributes to *any* record made
  during an attempt (your own module loggers, libraries): add it to a handler.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True, slots=True)
class ActivityScope:
    """The activity attempt the current code runs in."""

    workflow_id: str
    workflow_type: str
    activity: str
    step: int
    attempt: int

    def extras(self) -> dict[str, Any]:
        return {
            "workflow_id": self.workflow_id,
            "workflow_type": self.workflow_type,
            "activity": self.activity,
            "step": self.step,
            "attempt": self.attempt,
        }


_CURRENT: contextvars.ContextVar[ActivityScope | None] = contextvars.ContextVar(
    "pyweft_activity_scope", default=None
)


def current_activity() -> ActivityScope | None:
    """The activity attempt running in this context, or ``None`` outside activities."""
    return _CURRENT.get()


@contextmanager
def activity_scope(scope: ActivityScope) -> Iterator[None]:
    token = _CURRENT.set(scope)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class ActivityLogFilter(logging.Filter):
    """Adds the running activity's ids to every record that passes (never drops one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        scope = _CURRENT.get()
        if scope is not None:
            for key, value in scope.extras().items():
                if not hasattr(record, key):
                    setattr(record, key, value)
        return True


class _ActivityAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        scope = _CURRENT.get()
        if scope is not None:
            kwargs["extra"] = {**scope.extras(), **(kwargs.get("extra") or {})}
        return msg, kwargs


_ACTIVITY_LOG = _ActivityAdapter(logging.getLogger("pyweft.activity"), {})


def activity_log() -> logging.LoggerAdapter[logging.Logger]:
    """The ``pyweft.activity`` logger; inside an activity its records carry the attempt's ids."""
    return _ACTIVITY_LOG


__all__ = [
    "ActivityLogFilter",
    "ActivityScope",
    "activity_log",
    "activity_scope",
    "current_activity",
]
