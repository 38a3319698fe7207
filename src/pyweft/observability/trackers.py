"""Errors to trackers: :class:`ErrorReporter` hands every workflow failure and every
failed activity attempt, with its context, to a function of yours (Sentry, Rollbar,
a log shipper...). See the Sentry example in docs/guides/observability.md."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyweft.engine.replay.records import category_of
from pyweft.observability.interceptors import ActivityInput, CompletionInput, Interceptor

log = logging.getLogger("pyweft.trackers")

REPORTED_STATUSES = frozenset({"failed", "timed_out", "blocked"})


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorReport:
    """One failure. ``kind`` is ``"workflow"`` (the run ended failed or timed out, or it
    blocked) or ``"activity"`` (one attempt raised; ``attempt`` says which).
    ``exception`` is the live exception for an activity attempt, ``None`` for a run
    (its error is stored: ``error_type`` and ``message``)."""

    kind: str
    workflow_id: str
    workflow_type: str
    status: str | None
    error_type: str
    message: str
    failure_category: str
    headers: Mapping[str, str]
    activity: str | None = None
    step: int | None = None
    attempt: int | None = None
    exception: BaseException | None = None


class ErrorReporter(Interceptor):
    """Calls ``report(ErrorReport)`` for failed runs and failed activity attempts.

    ``activities=False`` reports runs only. A ``report`` that raises is logged and
    never changes what happens to the run or the activity.
    """

    def __init__(self, report: Callable[[ErrorReport], None], *, activities: bool = True) -> None:
        self._report = report
        self._activities = activities

    def workflow_completed(self, input: CompletionInput) -> None:
        if input.status not in REPORTED_STATUSES:
            return
        self._send(
            ErrorReport(
                kind="workflow",
                workflow_id=input.workflow_id,
                workflow_type=input.workflow_type,
                status=input.status,
                error_type=input.error_type or input.status,
                message=input.error_message or input.status,
                failure_category=input.failure_category or "application",
                headers=input.headers,
            )
        )

    async def execute_activity(
        self, input: ActivityInput, next: Callable[[ActivityInput], Awaitable[Any]]
    ) -> Any:
        try:
            return await next(input)
        except Exception as exc:
            if self._activities:
                self._send(
                    ErrorReport(
                        kind="activity",
                        workflow_id=input.workflow_id,
                        workflow_type=input.workflow_type,
                        status=None,
                        error_type=type(exc).__name__,
                        message=str(exc),
                        failure_category=category_of(exc),
                        headers=input.headers,
                        activity=input.activity,
                        step=input.step,
                        attempt=input.attempt,
                        exception=exc,
                    )
                )
            raise

    def _send(self, report: ErrorReport) -> None:
        try:
            self._report(report)
        except Exception:
            log.exception("the error reporter failed to report %s", report.error_type)
