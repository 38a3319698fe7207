"""One task on a worker: run its activity with the full activity context, under its limits.

The attempt sees the same :class:`~pyweft.ActivityContext` as one run inside an
engine: ids, times, the engine's fencing tokens, a tagged logger, heartbeats and
cancellation. Limits: the activity's ``timeout`` per attempt, and its
``heartbeat_timeout`` (an attempt that stops calling ``heartbeat()`` that long
fails). Cancellation comes from the worker: the claim was lost (the run cancelled
the step, or the claim expired) or the worker is shutting down.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, cast

from pyweft.codec import PayloadCodec, call_types, decode_args
from pyweft.definitions import ActivityDefinition
from pyweft.engine.steps.activity_context import ActivityContext, enter, leave
from pyweft.engine.steps.failures import failure_info
from pyweft.engine.tasks import records as tr
from pyweft.errors import ActivityTimeoutError, ApplicationError, PayloadError
from pyweft.observability import worker_side
from pyweft.observability.interceptors import Interceptor

if TYPE_CHECKING:
    from pyweft.engine.steps.heartbeats import Heartbeats

log = logging.getLogger("pyweft.worker")


class Beats:
    """What ``activity_context().heartbeat()`` reaches on a worker: the time of the last
    beat (the heartbeat timeout's watchdog reads it). Details are not kept: a worker's
    attempt has no earlier details to read."""

    __slots__ = ("last",)

    def __init__(self, now: float) -> None:
        self.last = now

    def beat(self, details: Any = None) -> None:
        self.last = time.monotonic()


@functools.lru_cache(maxsize=1024)
def _param_types(fn: Callable[..., Any]) -> tuple[object, ...]:
    """The activity's parameter annotations: resolved once, not for every attempt."""
    return call_types(fn, skip_first=False)[0]


async def run_task(
    task: tr.Task,
    act: ActivityDefinition,
    codec: PayloadCodec,
    executor: Executor,
    now: float,
    worker_id: str,
    actx_out: list[ActivityContext],
    interceptors: tuple[Interceptor, ...] = (),
) -> tr.TaskResult:
    """Run ``task`` and return its outcome (cancelled from outside: raises CancelledError)."""
    try:
        params = _param_types(act.fn)
        args = decode_args(codec, task.args, params)
    except PayloadError as exc:  # the same arguments fail on any worker
        return _failed(task, worker_id, now, exc, non_retryable=True)
    beats = Beats(time.monotonic())
    actx = ActivityContext(
        workflow_id=task.workflow_id,
        workflow_type=task.workflow_type,
        activity=task.activity,
        step=task.step,
        attempt=task.attempt,
        scheduled_at=task.scheduled_at,
        started_at=now,
        deadline=None if task.timeout_s is None else now + task.timeout_s,
        execution_token=lambda: task.execution_token,
        generation=task.generation,
        heartbeats=cast("Heartbeats", beats),
    )
    actx_out.append(actx)
    token = enter(actx)
    watched = task.timeout_s is not None or task.heartbeat_timeout_s is not None
    if act.is_async and not (watched or interceptors or task.headers):
        try:  # nothing to time or wrap: awaited here, without a task of its own
            value = await act.fn(*args)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return _failed(task, worker_id, now, exc)
        finally:
            leave(token)
        return _outcome(task, worker_id, now, codec, value)
    try:
        if interceptors or task.headers:  # the run's headers current, interceptors around

            async def inner(given: tuple[Any, ...]) -> Any:
                if act.is_async:
                    return await act.fn(*given)
                call = contextvars.copy_context().run
                return await asyncio.wrap_future(executor.submit(call, act.fn, *given))

            fut: asyncio.Future[Any] = asyncio.ensure_future(
                worker_side.attempt(
                    interceptors,
                    workflow_id=task.workflow_id,
                    workflow_type=task.workflow_type,
                    activity=task.activity,
                    step=task.step,
                    attempt=task.attempt,
                    args=args,
                    headers=task.headers,
                    inner=inner,
                )
            )
        elif act.is_async:
            fut = asyncio.ensure_future(act.fn(*args))
        else:
            call = contextvars.copy_context().run
            fut = asyncio.wrap_future(executor.submit(call, act.fn, *args))
    finally:
        leave(token)
    expired = await _watch(fut, task, beats)
    if expired is not None:
        actx.cancel(
            "the attempt's timeout passed"
            if expired == "attempt"
            else "it did not heartbeat within its heartbeat_timeout"
        )
        limit = task.timeout_s if expired == "attempt" else task.heartbeat_timeout_s
        what = "timed out after" if expired == "attempt" else "did not heartbeat for"
        timeout = ActivityTimeoutError(
            f"activity {task.activity!r} attempt {what} {limit:g}s (its "
            f"{'timeout' if expired == 'attempt' else 'heartbeat_timeout'})",
            kind=expired,
        )
        result = _failed(task, worker_id, now, timeout)
        return tr.TaskResult(
            task_id=result.task_id,
            ok=False,
            at=result.at,
            worker=worker_id,
            error=result.error,
            timeout_kind=expired,
        )
    try:
        value = fut.result()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return _failed(task, worker_id, now, exc)
    return _outcome(task, worker_id, now, codec, value)


def _outcome(
    task: tr.Task, worker_id: str, now: float, codec: PayloadCodec, value: Any
) -> tr.TaskResult:
    """The outcome of an attempt that returned ``value``."""
    try:
        payload = codec.encode(value)
    except PayloadError as exc:
        return _failed(task, worker_id, now, exc, non_retryable=True)
    return tr.TaskResult(task_id=task.id, ok=True, at=now, worker=worker_id, value=payload)


async def _watch(fut: asyncio.Future[Any], task: tr.Task, beats: Beats) -> str | None:
    """Wait for ``fut``; cancel it and return which limit passed, if one did."""
    start = time.monotonic()
    try:
        while True:
            waits: list[float] = []
            if task.timeout_s is not None:
                waits.append(start + task.timeout_s - time.monotonic())
            if task.heartbeat_timeout_s is not None:
                waits.append(beats.last + task.heartbeat_timeout_s - time.monotonic())
            if not waits:
                await asyncio.wait({fut})
                return None
            await asyncio.wait({fut}, timeout=max(0.0, min(waits)))
            if fut.done():
                return None
            now = time.monotonic()
            if task.timeout_s is not None and now >= start + task.timeout_s:
                fut.cancel()
                return "attempt"
            if (
                task.heartbeat_timeout_s is not None
                and now >= beats.last + task.heartbeat_timeout_s
            ):
                fut.cancel()
                return "heartbeat"
    except asyncio.CancelledError:
        fut.cancel()
        raise


def _failed(
    task: tr.Task, worker_id: str, now: float, exc: BaseException, *, non_retryable: bool = False
) -> tr.TaskResult:
    final = non_retryable or (isinstance(exc, ApplicationError) and exc.non_retryable)
    return tr.TaskResult(
        task_id=task.id,
        ok=False,
        at=now,
        worker=worker_id,
        error=failure_info(exc),
        non_retryable=final,
    )
