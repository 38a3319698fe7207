"""``Engine`` for scripts and WSGI apps: the async engine on a background loop, blocking calls.

Each method runs its async twin on the engine's loop thread and waits for
it, so arguments, return values, exceptions and ``timeout=`` mean exactly
what they mean on :class:`pyweft.Engine`; only handles and event iterators
are swapped for their blocking versions.
"""

from __future__ import annotations

import builtins
import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, TypeVarTuple, cast, overload

from pyweft.clock import Clock
from pyweft.codec import PayloadCodec
from pyweft.definitions import ActivityDefinition, Duration, WorkflowDefinition
from pyweft.engine.bulk import BulkPreview, BulkResult
from pyweft.engine.engine import DEFAULT_MAX_HISTORY_STEPS, DEFAULT_MAX_PAYLOAD_BYTES
from pyweft.engine.engine import Engine as AsyncEngine
from pyweft.engine.handle import WorkflowHandle as AsyncHandle
from pyweft.engine.handle import check_result_type
from pyweft.engine.messages.handler_catalog import MessageHandlers
from pyweft.engine.messages.reviews import ReviewInfo
from pyweft.engine.messages.updates import OMITTED
from pyweft.engine.ownership import StoreOwnership
from pyweft.engine.ownership.lease import LeaseHealth
from pyweft.engine.queues import Queue
from pyweft.engine.replay.info import Page, WorkflowInfo
from pyweft.engine.replay.residency import DEFAULT_MAX_CACHED_RUNS
from pyweft.engine.replay.stats import EngineStats
from pyweft.engine.schemas import WorkflowSchema
from pyweft.engine.steps.async_completion import PendingActivity
from pyweft.engine.visibility.reader import Group, History
from pyweft.errors import EngineClosedError
from pyweft.observability.interceptors import Interceptor
from pyweft.storage.base import Storage
from pyweft.sync import process
from pyweft.sync.blocking import Blocking
from pyweft.sync.events import EventIterator
from pyweft.sync.handle import WorkflowHandle
from pyweft.sync.loop import LoopThread, closed_error
from pyweft.sync.published import PublishedMixin
from pyweft.sync.queues import QueuesSync
from pyweft.sync.workers_api import WorkersTwins

if TYPE_CHECKING:
    from pyweft.engine.context import WorkflowContext
    from pyweft.engine.schedules.records import ScheduleInfo

P = ParamSpec("P")
T = TypeVar("T")
# As in the async engine: the workflow's parameters after the context, and its result.
Ts = TypeVarTuple("Ts")
R = TypeVar("R")

State = Literal["new", "opening", "open", "closing", "closed"]
Started = Literal["started", "signalled"]


class Engine(PublishedMixin, QueuesSync, WorkersTwins):
    """Runs durable workflows from synchronous code. Use ``with Engine(...) as engine``.

    Takes the same arguments as :class:`pyweft.Engine`. Construction starts one
    background thread with one event loop and builds the async engine there
    (opening the store); ``open()`` recovers runs; ``close()`` shuts the engine
    down, stops the loop and joins the thread. Workflows, activities and timers
    all run on that loop. Safe to call from many threads at once; never call it
    from the loop itself (a workflow or an async activity): that raises
    :class:`~pyweft.errors.WorkflowUsageError` instead of deadlocking.
    """

    supported_schema_version: int = AsyncEngine.supported_schema_version

    def __init__(
        self,
        storage: str | Storage | None = None,
        *,
        workflows: Iterable[Callable[..., Any]] = (),
        activities: Iterable[Callable[..., Any]] = (),
        recover: bool = True,
        clock: Clock | None = None,
        codec: PayloadCodec | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        max_history_steps: int = DEFAULT_MAX_HISTORY_STEPS,
        activity_threads: int = 32,
        sqlite_synchronous: Literal["FULL", "NORMAL"] | None = None,
        poll_interval: float = 1.0,
        version_mismatch: Literal["block", "fail_run", "raise"] = "block",
        on_nondeterminism: Literal["block", "fail_run"] = "block",
        retention: Mapping[str, Duration] | None = None,
        retention_sweep_interval: Duration = 60.0,
        retention_batch_size: int = 500,
        ownership: str | None = None,
        role: Literal["engine", "client"] = "engine",
        engine_id: str | None = None,
        lease_ttl: Duration = 30.0,
        lease_renew_interval: Duration = 5.0,
        lease_wait_timeout: Duration = 60.0,
        detect_second_instance: bool = False,
        second_instance_interval: Duration = 15.0,
        claim_ttl: Duration = 30.0,
        claim_renew_interval: Duration = 5.0,
        max_cached_runs: int = DEFAULT_MAX_CACHED_RUNS,
        stall_threshold: Duration | None = 1.0,
        serve_queues: Iterable[str] | None = None,
        queues: Iterable[Queue] = (),
        interceptors: Iterable[Interceptor] = (),
    ) -> None:
        self._lock = threading.Lock()
        self._state: State = "new"
        self._forked = False
        self._closing: concurrent.futures.Future[None] | None = None  # set by close()
        self._loop = LoopThread("pyweft-sync-loop")
        try:
            self._engine = self._loop.call(
                AsyncEngine,
                storage,
                workflows=workflows,
                activities=activities,
                recover=recover,
                clock=clock,
                codec=codec,
                max_payload_bytes=max_payload_bytes,
                max_history_steps=max_history_steps,
                activity_threads=activity_threads,
                sqlite_synchronous=sqlite_synchronous,
                poll_interval=poll_interval,
                version_mismatch=version_mismatch,
                on_nondeterminism=on_nondeterminism,
                retention=retention,
                retention_sweep_interval=retention_sweep_interval,
                retention_batch_size=retention_batch_size,
                ownership=ownership,
                role=role,
                engine_id=engine_id,
                lease_ttl=lease_ttl,
                lease_renew_interval=lease_renew_interval,
                lease_wait_timeout=lease_wait_timeout,
                detect_second_instance=detect_second_instance,
                second_instance_interval=second_instance_interval,
                claim_ttl=claim_ttl,
                claim_renew_interval=claim_renew_interval,
                max_cached_runs=max_cached_runs,
                stall_threshold=stall_threshold,
                serve_queues=serve_queues,
                queues=queues,
                interceptors=interceptors,
            )
        except BaseException:
            self._loop.stop()
            self._state = "closed"
            raise
        self._loop.owner = self
        process.track(self)

    def __repr__(self) -> str:
        return f"pyweft.sync.Engine(storage={self._engine.storage!r}, state={self._state!r})"

    def _run(
        self, fn: Callable[P, Coroutine[Any, Any, T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        self._loop.refuse_loop_thread(getattr(fn, "__name__", "call"))
        if self._state != "open":
            raise closed_error(forked=self._forked)
        return self._loop.run(fn, *args, **kwargs)

    # --- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> Engine:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self) -> None:
        """Check the store's schema and, unless ``recover=False``, resume every running run.

        If opening fails, the engine is closed (thread included) and the error raised.
        """
        self._loop.refuse_loop_thread("open")
        with self._lock:
            if self._state != "new":
                if self._forked:
                    raise closed_error(forked=True)
                raise EngineClosedError("an Engine can be opened only once; create a new one")
            self._state = "opening"
        try:
            self._loop.run(self._engine.open)
        except BaseException:
            with contextlib.suppress(Exception):
                self.close()
            raise
        with self._lock:
            if self._state == "opening":
                self._state = "open"

    def close(self) -> None:
        """Shut the engine down (runs stay resumable), stop the loop, join the thread.

        Idempotent, and safe from any thread but the loop's. Calls waiting in other
        threads get their answer or :class:`~pyweft.errors.EngineClosedError`. If
        Ctrl-C interrupts it, the shutdown goes on; call ``close()`` again to wait
        for the rest (the exit hook does so at interpreter exit).
        """
        self._loop.refuse_loop_thread("close")
        with self._lock:
            if self._state == "closed":
                return
            self._state = "closing"
            if self._closing is None:
                with contextlib.suppress(EngineClosedError):  # the loop already died
                    self._closing = self._loop.submit(self._engine.shutdown())
            closing = self._closing
        if closing is not None:
            try:
                self._loop.wait(closing, cancel_on_interrupt=False)
            except EngineClosedError:
                pass  # the loop died under the shutdown; nothing is left to stop
            except BaseException:
                if not closing.done():
                    raise  # interrupted while the shutdown goes on
                self._stopped()
                raise
        self._stopped()

    def shutdown(self) -> None:
        """Same as :meth:`close` (the async engine's name for it)."""
        self.close()

    def _stopped(self) -> None:
        self._loop.stop()
        with self._lock:
            self._state = "closed"
        process.forget(self)

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()  # another thread may have held it at the fork
        self._state = "closed"
        self._forked = True
        self._loop.after_fork_in_child()

    # --- registration and facts -------------------------------------------------------

    @property
    def async_engine(self) -> AsyncEngine:
        """The async engine underneath. Only for code already running on its loop (a
        workflow or async activity), where ``await sync_engine.async_engine.signal(...)``
        is the non-blocking way to call it."""
        return self._engine

    def register_workflow(self, fn: Callable[..., Any]) -> WorkflowDefinition:
        """Register a workflow function (decorated with ``@workflow`` or a plain ``async def``)."""
        return self._loop.call(self._engine.register_workflow, fn)

    def register_activity(self, fn: Callable[..., Any]) -> ActivityDefinition:
        """Register an activity engine-wide so workflows can call it by name."""
        return self._loop.call(self._engine.register_activity, fn)

    @property
    def storage(self) -> Storage:
        """The store; its methods are coroutines bound to the engine's loop."""
        return self._engine.storage

    @property
    def workflow_types(self) -> builtins.list[str]:
        return self._loop.call(lambda: self._engine.workflow_types)

    def registered_versions(self) -> dict[str, str]:
        return self._loop.call(self._engine.registered_versions)

    def workflow_schemas(self) -> builtins.list[WorkflowSchema]:
        return self._loop.call(self._engine.workflow_schemas)

    @property
    def clock(self) -> Clock:
        return self._engine.clock

    @property
    def codec(self) -> PayloadCodec:
        return self._engine.codec

    @property
    def max_payload_bytes(self) -> int:
        return self._engine.max_payload_bytes

    @property
    def instance_id(self) -> str:
        return self._engine.instance_id

    @property
    def engine_id(self) -> str:
        return self._engine.engine_id

    @property
    def ownership(self) -> str:
        return self._engine.ownership

    @property
    def schema_version(self) -> int | None:
        return self._engine.schema_version

    @property
    def store_was_new(self) -> bool:
        return self._engine.store_was_new

    def lease_health(self) -> LeaseHealth:
        return self._loop.call(self._engine.lease_health)

    def stats(self) -> EngineStats:
        return self._loop.call(self._engine.stats)

    def metrics_text(self) -> str:
        return self._loop.call(self._engine.metrics_text)

    def store_ownership(self) -> StoreOwnership:
        return self._run(self._engine.store_ownership)

    def reclaim(self) -> int:
        return self._run(self._engine.reclaim)

    # --- starting and controlling runs ------------------------------------------------

    @overload
    def start(
        self,
        wf: Callable[[WorkflowContext, *Ts], Awaitable[R]],
        *args: *Ts,
        id: str | None = None,
        idempotency_key: str | None = None,
        on_conflict: Literal["fail", "use_existing"] = "fail",
        execution_timeout: Duration | None = None,
        start_delay: Duration | None = None,
        start_at: datetime | float | None = None,
        tags: Sequence[str] = (),
        attributes: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> WorkflowHandle[R]: ...
    @overload
    def start(
        self,
        wf: str,
        *args: Any,
        id: str | None = None,
        idempotency_key: str | None = None,
        on_conflict: Literal["fail", "use_existing"] = "fail",
        execution_timeout: Duration | None = None,
        start_delay: Duration | None = None,
        start_at: datetime | float | None = None,
        tags: Sequence[str] = (),
        attributes: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> WorkflowHandle[Any]: ...
    def start(
        self,
        wf: Callable[..., Any] | str,
        *args: object,
        id: str | None = None,
        idempotency_key: str | None = None,
        on_conflict: Literal["fail", "use_existing"] = "fail",
        execution_timeout: Duration | None = None,
        start_delay: Duration | None = None,
        start_at: datetime | float | None = None,
        tags: Sequence[str] = (),
        attributes: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> WorkflowHandle[Any]:
        """Create a run and start driving it. Returns once the run is durably stored."""
        # The typed overloads are for callers; this forwards whatever it was given.
        start = cast(Callable[..., Coroutine[Any, Any, AsyncHandle[Any]]], self._engine.start)
        handle = self._run(
            start,
            wf,
            *args,
            id=id,
            idempotency_key=idempotency_key,
            on_conflict=on_conflict,
            execution_timeout=execution_timeout,
            start_delay=start_delay,
            start_at=start_at,
            tags=tags,
            attributes=attributes,
            headers=headers,
        )
        return WorkflowHandle(self, handle.id)

    @overload
    def get_handle(self, workflow_id: str) -> WorkflowHandle[Any]: ...
    @overload
    def get_handle(self, workflow_id: str, result_type: type[R]) -> WorkflowHandle[R]: ...
    def get_handle(self, workflow_id: str, result_type: object = None) -> WorkflowHandle[Any]:
        """A handle to an existing run. Does no I/O; errors surface when it is used.

        ``result_type`` only tells type checkers what ``result()`` returns.
        """
        check_result_type(result_type, "get_handle")
        return WorkflowHandle(self, workflow_id)

    def result(self, workflow_id: str, *, timeout: Duration | None = None) -> Any:
        """Block until a run finishes; return its result or raise its failure.

        ``timeout`` bounds the wait only (``ResultTimeoutError``); without it the
        call waits as long as the run takes. Ctrl-C stops the wait, not the run.
        """
        return self._run(self._engine.result, workflow_id, timeout=timeout)

    def cancel(self, workflow_id: str) -> None:
        self._run(self._engine.cancel, workflow_id)

    def suspend(self, workflow_id: str) -> None:
        self._run(self._engine.suspend, workflow_id)

    def resume(self, workflow_id: str) -> None:
        self._run(self._engine.resume, workflow_id)

    def fail(self, workflow_id: str, reason: str) -> None:
        self._run(self._engine.fail, workflow_id, reason)

    def recover_all(self) -> int:
        return self._run(self._engine.recover_all)

    def is_running_here(self, workflow_id: str) -> bool:
        return self._loop.call(self._engine.is_running_here, workflow_id)

    def inspect_lock(self, name: str) -> dict[str, Any]:
        return self._run(self._engine.inspect_lock, name)

    @property
    def schedules(self) -> Any:
        """``engine.schedules`` with blocking calls (``get``, ``pause``, ``backfill``...)."""
        return Blocking(self._loop.call(lambda: self._engine.schedules), self._run)

    @property
    def state(self) -> Any:
        """``engine.state`` with blocking calls (``get``, ``list``, ``set``, ``delete``)."""
        return Blocking(self._loop.call(lambda: self._engine.state), self._run)

    def quiescent(self) -> bool:
        return self._loop.call(self._engine.quiescent)

    def create_schedule(
        self, schedule_id: str, wf: Callable[..., Any] | str, *args: Any, **options: Any
    ) -> ScheduleInfo:
        return self._run(self._engine.create_schedule, schedule_id, wf, *args, **options)

    def get_state(
        self,
        name: str,
        *,
        workflow_id: str | None = None,
        workflow_type: str | None = None,
        default: Any = None,
    ) -> Any:
        return self._run(
            self._engine.get_state,
            name,
            workflow_id=workflow_id,
            workflow_type=workflow_type,
            default=default,
        )

    # --- messages ---------------------------------------------------------------------

    def complete_activity(self, token: str, result: Any = None) -> None:
        """Complete an activity waiting on ``complete_async()`` (see ``Engine``)."""
        self._run(self._engine.complete_activity, token, result)

    def fail_activity(self, token: str, error: BaseException | str) -> None:
        """Fail the attempt waiting on ``token`` (see ``Engine``)."""
        self._run(self._engine.fail_activity, token, error)

    def heartbeat_activity(self, token: str, details: Any = None) -> None:
        """Keep the attempt waiting on ``token`` alive (see ``Engine``)."""
        self._run(self._engine.heartbeat_activity, token, details)

    def pending_activities(
        self, workflow_id: str | None = None, *, limit: int = 50
    ) -> list[PendingActivity]:
        """Activities waiting for completion by token (see ``Engine``)."""
        return self._run(self._engine.pending_activities, workflow_id, limit=limit)

    def signal(
        self, workflow_id: str, name: str, payload: Any = None, *, signal_id: str | None = None
    ) -> None:
        """Send a signal. Returns once it is durably buffered for the run."""
        self._run(self._engine.signal, workflow_id, name, payload, signal_id=signal_id)

    @overload
    def start_or_signal(
        self,
        wf: Callable[[WorkflowContext, *Ts], Awaitable[R]],
        *args: *Ts,
        signal: tuple[str, Any],
        id: str | None = None,
        signal_id: str | None = None,
    ) -> tuple[WorkflowHandle[R], Literal["started", "signalled"]]: ...
    @overload
    def start_or_signal(
        self,
        wf: str,
        *args: Any,
        signal: tuple[str, Any],
        id: str | None = None,
        signal_id: str | None = None,
    ) -> tuple[WorkflowHandle[Any], Literal["started", "signalled"]]: ...
    def start_or_signal(
        self,
        wf: Callable[..., Any] | str,
        *args: object,
        signal: tuple[str, Any],
        id: str | None = None,
        signal_id: str | None = None,
    ) -> tuple[WorkflowHandle[Any], Literal["started", "signalled"]]:
        start_or_signal = cast(
            Callable[..., Coroutine[Any, Any, tuple[AsyncHandle[Any], Started]]],
            self._engine.start_or_signal,
        )
        handle, how = self._run(
            start_or_signal, wf, *args, signal=signal, id=id, signal_id=signal_id
        )
        return WorkflowHandle(self, handle.id), how

    def query(self, workflow_id: str, name: str, *args: Any, timeout: Duration = 5.0) -> Any:
        return self._run(self._engine.query, workflow_id, name, *args, timeout=timeout)

    def handlers(self, workflow_id: str, *, timeout: Duration = 5.0) -> MessageHandlers:
        return self._run(self._engine.handlers, workflow_id, timeout=timeout)

    def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any = OMITTED,
        *,
        timeout: Any = 5.0,
        idempotency_key: str | None = None,
    ) -> Any:
        """Send an update and block until the workflow answers (or ``timeout`` passes)."""
        return self._run(
            self._engine.update,
            workflow_id,
            name,
            payload,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )

    def update_result(self, update_id: str, *, timeout: Any = None) -> Any:
        return self._run(self._engine.update_result, update_id, timeout=timeout)

    def submit_review(
        self,
        review_id: str,
        decision: Literal["approved", "rejected", "needs_changes"],
        *,
        reviewer: str,
        feedback: str | None = None,
    ) -> None:
        self._run(
            self._engine.submit_review, review_id, decision, reviewer=reviewer, feedback=feedback
        )

    def list_reviews(
        self,
        *,
        status: str | None = "pending",
        workflow_id: str | None = None,
        review_type: str | None = None,
    ) -> builtins.list[ReviewInfo]:
        return self._run(
            self._engine.list_reviews,
            status=status,
            workflow_id=workflow_id,
            review_type=review_type,
        )

    def events(self, workflow_id: str | None = None) -> EventIterator:
        """Lifecycle events of every run (or one) from now on, as a blocking iterator."""
        return EventIterator(self._loop, functools.partial(self._engine.events, workflow_id))

    def run_events(self, workflow_id: str) -> EventIterator:
        """One run's events until its terminal event, as a blocking iterator."""
        return EventIterator(self._loop, functools.partial(self._engine.run_events, workflow_id))

    # --- visibility and maintenance ---------------------------------------------------

    def describe(self, workflow_id: str) -> WorkflowInfo:
        return self._run(self._engine.describe, workflow_id)

    def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        workflow_type: str | None = None,
        id_prefix: str | None = None,
        parent_id: str | None = None,
        created_after: datetime | float | None = None,
        created_before: datetime | float | None = None,
        updated_after: datetime | float | None = None,
        updated_before: datetime | float | None = None,
        attributes: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
        schedule_id: str | None = None,
        failure_category: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[WorkflowInfo]:
        return self._run(
            self._engine.list,
            status=status,
            workflow_type=workflow_type,
            id_prefix=id_prefix,
            parent_id=parent_id,
            created_after=created_after,
            created_before=created_before,
            updated_after=updated_after,
            updated_before=updated_before,
            attributes=attributes,
            tags=tags,
            schedule_id=schedule_id,
            failure_category=failure_category,
            limit=limit,
            cursor=cursor,
        )

    def aggregate(self, *, group_by: str, **filters: Any) -> builtins.list[Group]:
        return self._run(self._engine.aggregate, group_by=group_by, **filters)

    def history(self, workflow_id: str) -> History:
        return self._run(self._engine.history, workflow_id)

    @staticmethod
    def check_attributes(values: Mapping[str, Any]) -> None:
        AsyncEngine.check_attributes(values)

    def set_attributes(self, workflow_id: str, values: Mapping[str, Any]) -> None:
        self._run(self._engine.set_attributes, workflow_id, values)

    def fork(
        self,
        workflow_id: str,
        *,
        from_step: int | None = None,
        id: str | None = None,
        drive: bool = True,
    ) -> WorkflowHandle[Any]:
        handle = self._run(self._engine.fork, workflow_id, from_step=from_step, id=id, drive=drive)
        return WorkflowHandle(self, handle.id)

    def purge(self, **filters: Any) -> int:
        return self._run(self._engine.purge, **filters)

    def bulk_preview(
        self, operation: str, *, signal: tuple[str, Any] | None = None, **filters: Any
    ) -> BulkPreview:
        return self._run(self._engine.bulk_preview, operation, signal=signal, **filters)

    def bulk_commit(
        self,
        operation: str,
        *,
        confirmation_token: str,
        signal: tuple[str, Any] | None = None,
        actor: str | None = None,
        **filters: Any,
    ) -> BulkResult:
        return self._run(
            self._engine.bulk_commit,
            operation,
            confirmation_token=confirmation_token,
            signal=signal,
            actor=actor,
            **filters,
        )

    def bulk_audit(self, *, limit: int = 50) -> builtins.list[dict[str, Any]]:
        return self._run(self._engine.bulk_audit, limit=limit)

    def sweep_retention(self) -> int:
        return self._run(self._engine.sweep_retention)
