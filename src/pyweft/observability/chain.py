"""The engine's side of interceptors: a chain built once per engine, and the hooks the
run, the context and the activity attempt call.

Every hook site first checks ``services.interceptors is None`` (and, for headers,
whether the run has any), so an engine without interceptors pays one attribute test
per operation and nothing else.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from pyweft.engine.replay.operations import Composite
from pyweft.engine.replay.records import failure_category
from pyweft.observability import headers as hdrs
from pyweft.observability.interceptors import (
    ActivityInput,
    CompletionInput,
    Interceptor,
    OperationInput,
    QueryInput,
    StartInput,
    UpdateInput,
    WorkflowInput,
    compose_async,
    compose_sync,
    overriding,
)

if TYPE_CHECKING:
    from pyweft.engine.replay.run import Run
    from pyweft.engine.steps.activity_context import ActivityContext

log = logging.getLogger("pyweft.interceptors")


class InterceptorChain:
    """The interceptors of one engine, each hook's list worked out once."""

    __slots__ = (
        "_activity",
        "_completed",
        "_operation",
        "_query",
        "_start",
        "_update",
        "_workflow",
        "interceptors",
    )

    def __init__(self, interceptors: tuple[Interceptor, ...]) -> None:
        self.interceptors = interceptors
        self._start = overriding(interceptors, "start")
        self._workflow = overriding(interceptors, "execute_workflow")
        self._operation = overriding(interceptors, "operation")
        self._query = overriding(interceptors, "handle_query")
        self._update = overriding(interceptors, "handle_update")
        self._completed = overriding(interceptors, "workflow_completed")
        self._activity = overriding(interceptors, "execute_activity")

    @classmethod
    def build(cls, interceptors: tuple[Interceptor, ...]) -> InterceptorChain | None:
        return cls(interceptors) if interceptors else None

    # --- client side ------------------------------------------------------------------

    async def start(
        self,
        workflow_type: str,
        args: tuple[Any, ...],
        workflow_id: str | None,
        headers: dict[str, str],
        create: Callable[[dict[str, str]], Awaitable[str]],
    ) -> str:
        if not self._start:
            return await create(headers)

        async def inner(i: StartInput) -> str:
            return await create(hdrs.check_headers(i.headers, "headers (set by an interceptor)"))

        first = StartInput(
            workflow_type=workflow_type, args=args, workflow_id=workflow_id, headers=headers
        )
        result: str = await compose_async(self._start, "start", inner)(first)
        return result


async def start(
    chain: InterceptorChain | None,
    workflow_type: str,
    args: tuple[Any, ...],
    workflow_id: str | None,
    headers: object,
    create: Callable[[dict[str, str]], Awaitable[str]],
) -> str:
    """``engine.start``: check the caller's headers, let interceptors add to them, create."""
    given = hdrs.check_headers(headers)
    if chain is None:
        return await create(given)
    return await chain.start(workflow_type, args, workflow_id, given, create)


async def child_headers(
    parent: Run, workflow_type: str, args: tuple[Any, ...], child_id: str
) -> dict[str, str]:
    """A child's headers: its parent's, as the ``start`` interceptors leave them (they run
    in the parent's task, inside its ``child`` operation, so a tracer sees that span)."""
    heads = dict(parent.state.headers)
    icpt: InterceptorChain | None = parent.services.interceptors
    if icpt is None or not icpt._start:
        return heads
    first = StartInput(
        workflow_type=workflow_type,
        args=args,
        workflow_id=child_id,
        headers=heads,
        parent_id=parent.id,
    )

    async def inner(i: StartInput) -> str:
        return child_id

    await compose_async(icpt._start, "start", inner)(first)
    return hdrs.check_headers(heads, "headers (set by an interceptor)")


# --- workflow side ----------------------------------------------------------------------


def workflow_fn(run: Run) -> Callable[..., Awaitable[Any]]:
    """The workflow function as this run calls it: wrapped by ``execute_workflow``
    interceptors, with the run's headers current (``current_headers()``)."""
    chain: InterceptorChain | None = run.services.interceptors
    fn: Callable[..., Awaitable[Any]] = run.definition.fn
    if chain is None and not run.state.headers:
        return fn
    heads = hdrs.frozen(run.state.headers)
    wrap = chain._workflow if chain is not None else ()

    async def call(ctx: Any, *args: Any) -> Any:
        token = hdrs.enter(heads)
        try:
            if not wrap:
                return await fn(ctx, *args)

            async def inner(i: WorkflowInput) -> Any:
                return await fn(ctx, *i.args)

            first = WorkflowInput(
                workflow_id=run.id,
                workflow_type=run.definition.name,
                args=args,
                headers=heads,
                generation=run.state.generation,
                resumed=bool(run.journal or run.pendings),
            )
            return await compose_async(wrap, "execute_workflow", inner)(first)
        finally:
            hdrs.leave(token)

    return call


def operation(run: Run, kind: str, name: str, aw: Awaitable[Any]) -> Awaitable[Any]:
    """Called by ``ctx`` right after an operation took its step number."""
    chain: InterceptorChain | None = run.services.interceptors
    if chain is None or not chain._operation:
        return aw
    step = run.steps_taken
    first = OperationInput(
        workflow_id=run.id,
        workflow_type=run.definition.name,
        kind=kind,
        name=name,
        step=step,
        replaying=step in run.journal,
        headers=hdrs.frozen(run.state.headers),
    )

    async def inner(_: OperationInput) -> Any:
        return await aw

    # A Composite, so that ctx.all/ctx.race accept it as one operation and closing it
    # (a branch never run) closes the operation inside too.
    outer = cast(
        Coroutine[Any, Any, Any], compose_async(chain._operation, "operation", inner)(first)
    )
    return Composite(outer, [aw])


def wrap_query(run: Run, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    chain: InterceptorChain | None = run.services.interceptors
    if chain is None or not chain._query:
        return fn
    wrap = chain._query

    @functools.wraps(fn)  # (its annotations decode the query's arguments)
    def handler(*args: Any) -> Any:
        first = QueryInput(
            workflow_id=run.id,
            workflow_type=run.definition.name,
            name=name,
            args=args,
            headers=hdrs.frozen(run.state.headers),
        )
        return compose_sync(wrap, "handle_query", lambda i: fn(*i.args))(first)

    return handler


def wrap_update(run: Run, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    chain: InterceptorChain | None = run.services.interceptors
    if chain is None or not chain._update:
        return fn
    wrap = chain._update

    @functools.wraps(fn)  # (its annotations decode the update's payload)
    def handler(*args: Any) -> Any:
        first = UpdateInput(
            workflow_id=run.id,
            workflow_type=run.definition.name,
            name=name,
            args=args,
            replaying=run.replaying,
            headers=hdrs.frozen(run.state.headers),
        )
        return compose_sync(wrap, "handle_update", lambda i: fn(*i.args))(first)

    return handler


def completed(run: Run, status: str) -> None:
    """Called once the run's end (or its block) is stored."""
    chain: InterceptorChain | None = run.services.interceptors
    if chain is None or not chain._completed:
        return
    state = run.state
    error = state.error
    ended = state.ended_at if state.ended_at is not None else state.updated_at
    event = CompletionInput(
        workflow_id=run.id,
        workflow_type=state.type,
        status=status,
        error_type=None if error is None else error.type,
        error_message=None if error is None else error.message,
        failure_category=failure_category(status, error),
        duration_s=max(0.0, ended - state.created_at),
        headers=hdrs.frozen(state.headers),
    )
    for icpt in chain._completed:
        try:
            icpt.workflow_completed(event)
        except Exception:  # an observer must never change what happened to the run
            log.exception("interceptor %r failed in workflow_completed", icpt)


# --- activity side ----------------------------------------------------------------------


async def attempt(
    run: Run,
    actx: ActivityContext,
    args: tuple[Any, ...],
    inner: Callable[[tuple[Any, ...]], Awaitable[Any]],
) -> Any:
    """One activity attempt, wrapped by ``execute_activity`` interceptors, with the run's
    headers current (also inside a ``def`` activity's thread)."""
    chain: InterceptorChain | None = run.services.interceptors
    heads = hdrs.frozen(run.state.headers)
    token = hdrs.enter(heads)
    try:
        if chain is None or not chain._activity:
            return await inner(args)
        first = ActivityInput(
            workflow_id=run.id,
            workflow_type=run.definition.name,
            activity=actx.activity,
            step=actx.step,
            attempt=actx.attempt,
            args=args,
            headers=heads,
        )
        return await compose_async(chain._activity, "execute_activity", lambda i: inner(i.args))(
            first
        )
    finally:
        hdrs.leave(token)
