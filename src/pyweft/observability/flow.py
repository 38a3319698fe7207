"""Hooks where work waits: workflow queues, activity task queues and schedules.

The engine's queue dispatcher, its schedule firing and a :class:`~pyweft.Worker` call
these with what they just did; each interceptor that defines the matching method
(:class:`~pyweft.observability.metrics.MetricsInterceptor` does) is told. Without such
an interceptor a call costs one tuple walk. An interceptor's error is logged, never
raised into the dispatcher.

- ``observe_dispatch(kind, queue, seconds)``: a run left a workflow queue
  (``kind="workflow"``: from enqueue, or its delay, to dispatch) or a worker claimed a
  task (``kind="activity"``: from the task's write to its claim);
- ``observe_queue_depth(kind, queue, depth)``: how many wait in a queue, as just read;
- ``observe_schedule_fired(workflow_type, lag_s)``: a schedule started a run
  ``lag_s`` after the occurrence's nominal time (``None`` for a backfill, whose
  occurrences are in the past on purpose).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger("pyweft.interceptors")


def _call(interceptors: Iterable[object], method: str, *args: Any) -> None:
    for icpt in interceptors:
        hook = getattr(icpt, method, None)
        if callable(hook):
            try:
                hook(*args)
            except Exception:
                log.exception("interceptor %r failed in %s; ignored", icpt, method)


def wants(interceptors: Iterable[object], method: str) -> bool:
    """Some interceptor defines ``method`` (worth a read of the store to feed it)."""
    return any(callable(getattr(i, method, None)) for i in interceptors)


def of(services: Any) -> tuple[object, ...]:
    """The interceptors of an engine's run services (``None`` or no chain: none)."""
    chain = None if services is None else services.interceptors
    return () if chain is None else tuple(chain.interceptors)


def dispatched(interceptors: Iterable[object], kind: str, queue: str, seconds: float) -> None:
    _call(interceptors, "observe_dispatch", kind, queue, max(0.0, seconds))


def queue_depth(interceptors: Iterable[object], kind: str, queue: str, depth: int) -> None:
    _call(interceptors, "observe_queue_depth", kind, queue, depth)


def schedule_fired(interceptors: Iterable[object], workflow_type: str, lag_s: float | None) -> None:
    _call(
        interceptors,
        "observe_schedule_fired",
        workflow_type,
        None if lag_s is None else max(0.0, lag_s),
    )


async def count(storage: Any, prefixes: Iterable[str]) -> int:
    """Keys under ``prefixes``: the adapter's ``count`` when it has one, else a scan."""
    counter = getattr(storage, "count", None)
    total = 0
    for prefix in prefixes:
        total += await counter(prefix) if callable(counter) else len(await storage.scan(prefix))
    return total
