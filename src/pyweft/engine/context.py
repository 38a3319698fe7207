"""``WorkflowContext``: the handle a workflow uses for every durable operation.

Each method that performs a durable step takes its step number when it is
*called* and returns an awaitable, so steps started concurrently (for example
with ``asyncio.gather``) get deterministic numbers in call order.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar, overload

from pyweft.definitions import ActivityDefinition, Duration, RetryPolicy, activity_definition_of
from pyweft.durations import parse_duration, parse_optional_duration
from pyweft.engine.run import Run
from pyweft.errors import ActivityNotRegisteredError, InvalidDurationError

T = TypeVar("T")


class _ReplayFilter(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A workflow logger that stays quiet while replaying recorded steps."""

    def __init__(self, logger: logging.Logger, run: Run) -> None:
        super().__init__(logger, {"workflow_id": run.id, "workflow_type": run.definition.name})
        self._run = run

    def isEnabledFor(self, level: int) -> bool:
        return not self._run.replaying and super().isEnabledFor(level)


class WorkflowContext:
    """Passed as the first argument to every workflow function."""

    __slots__ = ("_log", "_run")

    def __init__(self, run: Run) -> None:
        self._run = run
        self._log: logging.LoggerAdapter[logging.Logger] | None = None

    @property
    def workflow_id(self) -> str:
        return self._run.id

    @property
    def workflow_type(self) -> str:
        return self._run.definition.name

    @property
    def is_replaying(self) -> bool:
        """True while the run is re-executing steps that were already recorded."""
        return self._run.replaying

    @property
    def log(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger tagged with the workflow id that is silent during replay."""
        if self._log is None:
            self._log = _ReplayFilter(logging.getLogger("pyweft.workflow"), self._run)
        return self._log

    @overload
    def run(
        self,
        activity: Callable[..., Awaitable[T]],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        schedule_to_close: Duration | None = None,
    ) -> Awaitable[T]: ...
    @overload
    def run(
        self,
        activity: Callable[..., T],
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        schedule_to_close: Duration | None = None,
    ) -> Awaitable[T]: ...
    @overload
    def run(
        self,
        activity: str,
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        schedule_to_close: Duration | None = None,
    ) -> Awaitable[Any]: ...
    def run(
        self,
        activity: Callable[..., Any] | str,
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        schedule_to_close: Duration | None = None,
    ) -> Awaitable[Any]:
        """Run an activity (a function or a registered name) as one durable step.

        Its result is committed before it is returned; on replay the recorded
        result is returned without running the activity again. Options given
        here override the activity's own for this call. Pass activity
        arguments positionally.
        """
        act = self._resolve(activity)
        step = self._run.alloc_step()
        return self._run.activity(
            step,
            act,
            args,
            retry if retry is not None else act.retry,
            act.timeout_s if timeout is None else parse_optional_duration(timeout, field="timeout"),
            act.schedule_to_close_s
            if schedule_to_close is None
            else parse_optional_duration(schedule_to_close, field="schedule_to_close"),
        )

    def _resolve(self, activity: Callable[..., Any] | str) -> ActivityDefinition:
        if isinstance(activity, str):
            act = self._run.definition.activities.get(
                activity
            ) or self._run.services.activities.get(activity)
            if act is None:
                known = sorted({*self._run.definition.activities, *self._run.services.activities})
                raise ActivityNotRegisteredError(
                    f"activity {activity!r} is not registered (workflow {self.workflow_type!r} "
                    f"knows: {', '.join(known) or 'none'}). Pass the function itself, list it in "
                    "@workflow(activities=[...]) or Engine(activities=[...]).",
                    activity_name=activity,
                )
            return act
        if not callable(activity):
            raise TypeError(f"ctx.run expects an activity function or name, got {activity!r}")
        return activity_definition_of(activity)

    def sleep(self, duration: Duration) -> Awaitable[None]:
        """Sleep durably: survives restarts and keeps its original deadline."""
        seconds = parse_duration(duration, field="sleep duration")
        return self._run.sleep_until(self._run.alloc_step(), None, seconds)

    def sleep_until(self, when: datetime | float) -> Awaitable[None]:
        """Sleep durably until an absolute time (aware ``datetime`` or epoch seconds)."""
        if isinstance(when, datetime):
            if when.tzinfo is None:
                raise InvalidDurationError(
                    f"sleep_until needs a timezone-aware datetime, got naive {when.isoformat()}; "
                    "use datetime.now(timezone.utc) + timedelta(...)"
                )
            deadline = when.timestamp()
        elif isinstance(when, int | float) and not isinstance(when, bool):
            deadline = float(when)
        else:
            raise InvalidDurationError(
                f"sleep_until expects an aware datetime or epoch seconds, got {when!r}"
            )
        return self._run.sleep_until(self._run.alloc_step(), deadline, 0.0)
