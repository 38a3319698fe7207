"""Which activity attempt is running now, for log records.

The engine sets the attempt's :class:`~.activity_context.ActivityContext` in a
context variable around each attempt; it follows the attempt into ``async``
code and, copied explicitly, into the worker thread of a plain ``def``
activity. Two ways to use it for logs:

- :func:`activity_log` is a logger (like ``ctx.log`` for workflows) whose
  records carry ``workflow_id``, ``workflow_type``, ``activity``, ``step``,
  ``attempt`` and the attempt's tokens as extras;
- :class:`ActivityLogFilter` adds the same attributes to *any* record made
  during an attempt (your own module loggers, libraries): add it to a handler.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from pyweft.engine.steps.activity_context import (
    ActivityContext,
    activity_log,
    current_activity,
    enter,
    leave,
)

ActivityScope = ActivityContext  # the name earlier releases used for the attempt record


@contextmanager
def activity_scope(scope: ActivityContext) -> Iterator[None]:
    token = enter(scope)
    try:
        yield
    finally:
        leave(token)


class ActivityLogFilter(logging.Filter):
    """Adds the running activity's ids to every record that passes (never drops one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        scope = current_activity()
        if scope is not None:
            for key, value in scope.extras().items():
                if not hasattr(record, key):
                    setattr(record, key, value)
        return True


__all__ = [
    "ActivityLogFilter",
    "ActivityScope",
    "activity_log",
    "activity_scope",
    "current_activity",
]
