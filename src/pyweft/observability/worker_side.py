"""The worker's side of interceptors and headers: one activity attempt run by a
:class:`~pyweft.worker.Worker` process.

The task record carries the run's headers; here they are made current for the
attempt (``current_headers()``, also inside a ``def`` activity's thread) and the
worker's ``execute_activity`` interceptors wrap it with the same
:class:`~pyweft.observability.ActivityInput` the engine builds for an attempt it
runs itself. A worker that has neither pays nothing: the runner skips this.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pyweft.observability import headers as hdrs
from pyweft.observability.interceptors import (
    ActivityInput,
    Interceptor,
    check_interceptors,
    compose_async,
    overriding,
)


def activity_chain(
    interceptors: object,
) -> tuple[tuple[Interceptor, ...], tuple[Interceptor, ...]]:
    """``Worker(interceptors=...)`` checked (``ConfigurationError``): all of them (their
    ``observe_*`` methods hear about dispatch latency and queue depth, see :mod:`.flow`),
    and those that override ``execute_activity`` (the one hook a worker runs)."""
    checked = check_interceptors(interceptors)
    return checked, overriding(checked, "execute_activity")


async def attempt(
    chain: tuple[Interceptor, ...],
    *,
    workflow_id: str,
    workflow_type: str,
    activity: str,
    step: int,
    attempt: int,
    args: tuple[Any, ...],
    headers: Mapping[str, str] | None,
    inner: Callable[[tuple[Any, ...]], Awaitable[Any]],
) -> Any:
    """Run ``inner(args)`` with ``headers`` current, wrapped by ``chain``."""
    heads = hdrs.frozen(headers)
    token = hdrs.enter(heads)
    try:
        if not chain:
            return await inner(args)
        first = ActivityInput(
            workflow_id=workflow_id,
            workflow_type=workflow_type,
            activity=activity,
            step=step,
            attempt=attempt,
            args=args,
            headers=heads,
        )
        return await compose_async(chain, "execute_activity", lambda i: inner(i.args))(first)
    finally:
        hdrs.leave(token)
