"""One activity attempt: run the function under its limits, and cancel it when told.

An attempt ends early for four reasons: the run is cancelled or times out, the
attempt's ``timeout`` (or the ``schedule_to_close`` budget) passes, it stops
heartbeating for ``heartbeat_timeout``, or the workflow stops awaiting it (its
branch lost a ``ctx.race``). Then:

- an ``async def`` activity gets ``CancelledError`` at its next ``await``, and
  the engine waits for it to finish unwinding;
- a plain ``def`` activity cannot be interrupted in its thread: its context's
  ``cancelled`` turns true (``heartbeat()`` and ``check_cancelled()`` raise
  ``ActivityCancelledError``) and the engine waits up to the activity's
  ``cancel_grace`` for the thread to return. One that ignores the request keeps
  its thread until it returns by itself; its outcome is discarded and a warning
  is logged. The step's outcome is the cancellation or timeout either way.
  When the engine stops driving the run (shutdown, lost ownership) nothing is
  recorded, so it does not wait: the thread finishes on its own, as before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
from typing import Any

from pyweft.definitions import ActivityDefinition
from pyweft.engine.replay.run import Run
from pyweft.engine.steps.activity_context import ActivityContext
from pyweft.engine.steps.heartbeats import Heartbeats
from pyweft.errors import ActivityTimeoutError
from pyweft.observability import chain

log = logging.getLogger("pyweft.activities")


async def run_attempt(
    run: Run,
    act: ActivityDefinition,
    args: tuple[Any, ...],
    actx: ActivityContext,
    beats: Heartbeats,
    timeout_s: float | None,
    timeout_kind: str,
) -> Any:
    """Run one attempt of ``act`` and return its value (or raise what it raised)."""
    if run.services.interceptors is not None or run.state.headers:  # interceptors, headers
        return await chain.attempt(
            run, actx, args, lambda a: _attempt(run, act, a, actx, beats, timeout_s, timeout_kind)
        )
    return await _attempt(run, act, args, actx, beats, timeout_s, timeout_kind)


async def _attempt(
    run: Run,
    act: ActivityDefinition,
    args: tuple[Any, ...],
    actx: ActivityContext,
    beats: Heartbeats,
    timeout_s: float | None,
    timeout_kind: str,
) -> Any:
    heartbeat_s = act.heartbeat_timeout_s
    if act.is_async and timeout_s is None and heartbeat_s is None:
        try:  # the common case, without a task of its own
            return await act.fn(*args)
        except asyncio.CancelledError:
            actx.cancel(_why_cancelled(run))
            raise
    cf: concurrent.futures.Future[Any] | None = None
    done: asyncio.Future[None] | None = None
    if act.is_async:
        fut: asyncio.Future[Any] = asyncio.ensure_future(act.fn(*args))
    else:
        cf, done = _submit(run, act, args)
        fut = asyncio.wrap_future(cf)
    limits = _Limits(run, fut, beats, timeout_s, timeout_kind, heartbeat_s)
    try:
        return await fut
    except asyncio.CancelledError:
        expired = limits.expired
        actx.cancel(_EXPIRED.get(expired, "") if expired else _why_cancelled(run))
        if cf is not None and done is not None and not run.stopping:
            # Its outcome is recorded: give the thread its grace to stop first. (When
            # the engine stops driving the run, nothing is recorded and nobody waits.)
            await _grace(run, act, actx, cf, done)
        if expired is not None:
            raise ActivityTimeoutError(limits.message(act), kind=expired) from None
        raise
    finally:
        limits.cancel()
        if not fut.done():
            fut.cancel()


_EXPIRED = {
    "attempt": "the attempt's timeout passed",
    "schedule_to_close": "the activity's schedule_to_close budget ran out",
    "heartbeat": "it did not heartbeat within its heartbeat_timeout",
}


def _why_cancelled(run: Run) -> str:
    if run.terminating == "timed_out":
        return "the run passed its execution_timeout"
    if run.torn_down is not None:
        return "the engine stopped driving the run"
    if run.cancel_requested:
        return "the run was cancelled"
    return "the workflow stopped waiting for it (e.g. its branch lost a race)"


def _submit(
    run: Run, act: ActivityDefinition, args: tuple[Any, ...]
) -> tuple[concurrent.futures.Future[Any], asyncio.Future[None]]:
    """Start a ``def`` activity in the pool, in a copy of this context (so it sees the
    activity context); ``done`` resolves on the loop when its thread returns."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def call() -> Any:
        try:
            return act.fn(*args)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_resolve, done)

    cf = run.services.executor.submit(contextvars.copy_context().run, call)
    return cf, done


async def _grace(
    run: Run,
    act: ActivityDefinition,
    actx: ActivityContext,
    cf: concurrent.futures.Future[Any],
    done: asyncio.Future[None],
) -> None:
    """Give a cancelled ``def`` activity up to its grace period to return."""
    if cf.done() or done.done():  # finished, or cancelled before its thread started
        return
    clock = run.services.clock
    limit = run.wait_until(clock.now() + act.cancel_grace_s)
    try:
        await asyncio.wait({done, limit}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        limit.cancel()
    if not done.done():
        log.warning(
            "activity %s (workflow %s step %d attempt %d) ignored its cancellation (%s) for "
            "its %.1fs grace; it keeps its worker thread until it returns, and whatever it "
            "returns is discarded. Check activity_context().cancelled in long loops.",
            act.name,
            actx.workflow_id,
            actx.step,
            actx.attempt,
            actx.cancel_reason,
            act.cancel_grace_s,
            extra=actx.extras(),
        )


class _Limits:
    """The attempt's timers: its own timeout and the heartbeat watchdog."""

    __slots__ = ("_beats", "_fut", "_hb_s", "_hb_timer", "_run", "_timer", "expired", "timeout_s")

    def __init__(
        self,
        run: Run,
        fut: asyncio.Future[Any],
        beats: Heartbeats,
        timeout_s: float | None,
        timeout_kind: str,
        heartbeat_s: float | None,
    ) -> None:
        self._run = run
        self._fut = fut
        self._beats = beats
        self._hb_s = heartbeat_s
        self.timeout_s = timeout_s
        self.expired: str | None = None
        clock = run.services.clock
        now = clock.now()
        self._timer = (
            clock.call_at(now + timeout_s, lambda: self._expire(timeout_kind))
            if timeout_s is not None
            else None
        )
        self._hb_timer = (
            clock.call_at(beats.last_beat + heartbeat_s, self._check_heartbeat)
            if heartbeat_s is not None
            else None
        )

    def _check_heartbeat(self) -> None:
        assert self._hb_s is not None
        clock = self._run.services.clock
        due = self._beats.last_beat + self._hb_s
        if clock.now() >= due:
            self._expire("heartbeat")
        else:
            self._hb_timer = clock.call_at(due, self._check_heartbeat)

    def _expire(self, kind: str) -> None:
        if self.expired is None and not self._fut.done():
            self.expired = kind
            self._fut.cancel()

    def message(self, act: ActivityDefinition) -> str:
        if self.expired == "heartbeat":
            return (
                f"activity {act.name!r} attempt did not heartbeat for "
                f"{act.heartbeat_timeout_s:.3f}s (its heartbeat_timeout)"
            )
        if self.expired == "schedule_to_close":
            return f"activity {act.name!r} ran out of its schedule_to_close budget"
        return f"activity {act.name!r} attempt timed out after {self.timeout_s:.3f}s"

    def cancel(self) -> None:
        for timer in (self._timer, self._hb_timer):
            if timer is not None:
                timer.cancel()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
