"""Sagas: compensate completed steps, newest first, when a later step fails.

Compensations are ordinary activity steps, so they are durable: a crash in the
middle of compensating resumes compensating (replay raises the same failure
and walks the same compensation path), and no compensation runs twice.

Compensations finish even when the run is cancelled or passes its execution
timeout while they run: both wait for the compensations, for at most a grace
period (5 minutes of engine time by default, ``saga.grace_period``) counted
from the moment the interruption is first held back. Past the grace period the
compensation under way is interrupted, the rest are skipped, and the run ends
``cancelled`` or ``timed_out``. A cancel held back this way is delivered once
the compensations are done, so the run ends ``cancelled`` even if the workflow
catches the original failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pyweft.clock import TimerHandle
from pyweft.durations import DurationLike, parse_duration
from pyweft.errors import ActivityError

if TYPE_CHECKING:
    from pyweft.engine.context import WorkflowContext
    from pyweft.engine.replay.run import Run

log = logging.getLogger("pyweft.saga")

DEFAULT_GRACE_PERIOD_S = 300.0


class CompensationShield:
    """Holds back a run's cancel and execution timeout while its saga compensates.

    The grace period starts the first time an interruption is held back; when it
    runs out, the compensation under way is cancelled.
    """

    def __init__(self, run: Run, grace_s: float) -> None:
        self._run = run
        self._grace_s = grace_s
        self.expires_at: float | None = None
        self.current: asyncio.Future[Any] | None = None  # the compensation under way
        self._timer: TimerHandle | None = None

    def holds(self, now: float) -> bool:
        """True while an interruption due now may wait (starting the grace period)."""
        if self.expires_at is None:
            self.expires_at = now + self._grace_s
            self._timer = self._run.services.clock.call_at(self.expires_at, self._expire)
        return now < self.expires_at

    def _expire(self) -> None:
        if self.current is not None and not self.current.done():
            self.current.cancel()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


class Saga:
    """Use as ``async with ctx.saga() as saga:``; on an exception the block compensates.

    ``await saga.run(activity, *args, compensate=undo)`` runs a step and, once it
    succeeded, remembers ``undo(result)``; ``saga.add_compensation(fn, *args)``
    remembers any activity call. Compensation failures are logged and skipped so
    the others still run; the original error is re-raised afterwards. A cancel or
    execution timeout that lands while compensating waits for the compensations,
    for at most :attr:`grace_period` seconds.
    """

    def __init__(self, ctx: WorkflowContext) -> None:
        self._ctx = ctx
        self._compensations: list[tuple[Callable[..., Any] | str, tuple[Any, ...]]] = []
        self._grace_s = DEFAULT_GRACE_PERIOD_S

    @property
    def grace_period(self) -> float:
        """How long (engine seconds) a cancel or timeout waits for compensations to finish."""
        return self._grace_s

    @grace_period.setter
    def grace_period(self, value: DurationLike) -> None:
        self._grace_s = parse_duration(value, field="saga grace_period")

    def add_compensation(self, activity: Callable[..., Any] | str, *args: Any) -> None:
        self._compensations.append((activity, args))

    async def run(
        self,
        activity: Callable[..., Any] | str,
        *args: Any,
        compensate: Callable[..., Any] | str | None = None,
        **options: Any,
    ) -> Any:
        result = await self._ctx.run(activity, *args, **options)
        if compensate is not None:
            self._compensations.append((compensate, (result,)))
        return result

    async def compensate(self) -> None:
        """Run every registered compensation, newest first, each as a durable step.

        Raises ``asyncio.CancelledError`` afterwards if the run was cancelled (or
        timed out) meanwhile: the interruption was held back, not dropped.
        """
        run: Run = self._ctx._run
        outer = run.shield
        shield = CompensationShield(run, self._grace_s)
        run.shield = shield
        held = False
        try:
            while self._compensations:
                activity, args = self._compensations.pop()
                try:
                    held |= await _shielded(run, shield, self._ctx.run(activity, *args))
                except ActivityError as err:
                    log.warning("saga compensation %s failed and was skipped: %s", activity, err)
        finally:
            run.shield = outer
            shield.close()
        if held or run.interruption_due():
            raise asyncio.CancelledError()

    async def __aenter__(self) -> Saga:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and isinstance(exc, Exception | asyncio.CancelledError):
            await self.compensate()


async def _shielded(
    run: Run, shield: CompensationShield, step: Coroutine[Any, Any, Any] | Any
) -> bool:
    """Await one compensation step (its number already taken) in a task of its own, so
    a cancel or timeout that interrupts the workflow's task does not interrupt it. True
    if such an interruption was held back meanwhile."""
    inner = asyncio.ensure_future(step)
    shield.current = inner
    held = False
    try:
        while True:
            try:
                await asyncio.shield(inner)
                return held
            except asyncio.CancelledError:
                if inner.done():
                    raise  # the compensation itself was interrupted: the grace ran out
                now = run.services.clock.now()
                if run.torn_down is not None or run.stopping or not shield.holds(now):
                    inner.cancel()
                    await asyncio.gather(inner, return_exceptions=True)
                    raise
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                held = True
    finally:
        shield.current = None
