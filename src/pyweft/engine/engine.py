"""``Engine``: the public facade that starts, drives, recovers and inspects runs.

The work happens in the engine's parts (``core``, ``creation``, ``control``,
``maintenance``, and the messaging modules); this class is the documented
surface users call. It holds registration, open/close and ``start``, and
inherits the rest from mixins: run control, ownership, messaging, inspection,
schedules, shared state and queues (the ``*_api.py`` modules beside it) and
workers (``tasks/api.py``).
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, TypeVarTuple, overload

from pyweft.clock import Clock, SystemClock, TimerHandle
from pyweft.codec import DefaultPayloadCodec, PayloadCodec
from pyweft.definitions import (
    ActivityDefinition,
    Duration,
    WorkflowDefinition,
    activity_definition_of,
    is_activity,
    refuse_activity_as_workflow,
    workflow,
    workflow_definition_of,
)
from pyweft.durations import parse_duration, parse_optional_duration
from pyweft.engine import options
from pyweft.engine.control import commands, creation, maintenance
from pyweft.engine.control.core import EngineCore
from pyweft.engine.control.stalls import StallMonitor
from pyweft.engine.control_api import RunControlAPI
from pyweft.engine.handle import WorkflowHandle, check_result_type
from pyweft.engine.inspection_api import InspectionAPI
from pyweft.engine.messages.reviews import ReviewDesk
from pyweft.engine.messages.signals import SignalSender
from pyweft.engine.messages.updates import HOOKS as UPDATE_HOOKS
from pyweft.engine.messages.updates import UpdateClient
from pyweft.engine.messages.wakeups import WakeupPoller
from pyweft.engine.messaging_api import MessagingAPI
from pyweft.engine.ownership import MODES, check_mode_marker, resolve_ownership, stored_mode
from pyweft.engine.ownership.detector import SecondInstanceDetector
from pyweft.engine.ownership.identity import Incarnation, current, new_instance_id
from pyweft.engine.ownership.lease import LeaseManager
from pyweft.engine.ownership_api import OwnershipAPI
from pyweft.engine.queues.queue import Queue
from pyweft.engine.queues_api import QueuesAPI
from pyweft.engine.replay import keys
from pyweft.engine.replay.redrive import Redriver
from pyweft.engine.replay.residency import DEFAULT_MAX_CACHED_RUNS
from pyweft.engine.replay.services import RunServices
from pyweft.engine.replay.stats import EngineStats
from pyweft.engine.schedules_api import SchedulesAPI
from pyweft.engine.state_api import StateAPI
from pyweft.engine.tasks.api import WorkersAPI
from pyweft.engine.tasks.dispatch import TaskDispatcher
from pyweft.errors import (
    ConfigurationError,
    DefinitionError,
    EngineClosedError,
    SchemaVersionError,
    StorageCapabilityError,
)
from pyweft.observability import chain
from pyweft.observability.chain import InterceptorChain
from pyweft.observability.exposition import commit_observer, prometheus_text
from pyweft.observability.interceptors import Interceptor, check_interceptors
from pyweft.storage.base import Expect, Put, Storage
from pyweft.storage.file_lock import StoreFileLock

if TYPE_CHECKING:
    from pyweft.engine.context import WorkflowContext
    from pyweft.engine.schedules.service import Schedules
    from pyweft.engine.state.admin import StateAdmin

log = logging.getLogger("pyweft.engine")

DEFAULT_MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_HISTORY_STEPS = 100_000
_SHUTDOWN_GRACE_S = 5.0  # how long runs may take to finish a commit already under way

# Typing of ``start`` / ``start_or_signal``: ``Ts`` are the workflow's parameters after
# the context and ``R`` its return type. A TypeVarTuple rather than a ParamSpec because
# the options (``id=``, ``on_conflict=``...) follow ``*args`` and neither mypy nor
# pyright allows keyword parameters between ``*args: P.args`` and ``**kwargs: P.kwargs``;
# workflow arguments are positional anyway.
Ts = TypeVarTuple("Ts")
R = TypeVar("R")


class Engine(
    RunControlAPI,
    OwnershipAPI,
    MessagingAPI,
    InspectionAPI,
    SchedulesAPI,
    StateAPI,
    WorkersAPI,
    QueuesAPI,
):
    """Runs durable workflows on a store. Use ``async with Engine(...) as engine``.

    ``storage`` is a URL (``sqlite:///app.db``, ``memory://``), a
    :class:`~pyweft.storage.Storage` instance, or ``None`` for SQLite at
    ``$PYWEFT_DATABASE_URL`` or ``./pyweft.db``. Entering the engine recovers
    every run an earlier process left running unless ``recover=False``.

    ``version_mismatch``: what the engine does with a run whose stored workflow
    version differs from the registered one and that no other engine drives:
    ``"block"`` (the default) stores it as ``blocked`` until an engine that
    registers its version takes it; ``"fail_run"`` fails it with
    ``VersionMismatchError``; ``"raise"`` makes recovery on entering the engine
    raise it. Such a run is never claimed nor driven here.
    ``on_nondeterminism``: what happens when the code no longer replays a run's
    journal (``NonDeterminismError``, or a ``ctx.get_version`` pin it dropped):
    ``"block"`` (the default) stops the run, keeps its journal and stores it as
    ``blocked`` until code that replays it recovers it (or ``resume``);
    ``"fail_run"`` fails it.
    ``retention``: how long finished runs are kept per status (e.g.
    ``{"completed": "7d"}``); swept every ``retention_sweep_interval`` in
    batches of ``retention_batch_size``.
    ``max_cached_runs``: how many runs stay in memory; past it, runs idle in a
    wait (signal, update, condition, review, sleep) are evicted, oldest first,
    and replayed from their journal when something concerns them.
    ``serve_queues``: the activity task queues this engine runs itself (``None``, the
    default: all); an activity on another queue is handed to worker processes
    (``pyweft.Worker``), and ``[]`` makes the engine a pure orchestrator.
    ``stall_threshold``: an event loop blocked this long is logged, naming the
    activity that blocked it (``None``: off); a run whose activity keeps stalling
    the engine past its claims or lease is failed (``EventLoopStall``).
    ``queues``: workflow queues this engine accepts ``enqueue`` to and (unless it is
    a client) dispatches; see :class:`Queue` and ``docs/guides/queues.md``.
    ``interceptors``: ``pyweft.observability.Interceptor`` instances, the first
    outermost (docs/guides/observability.md).
    """

    supported_schema_version: int = keys.SCHEMA_VERSION
    """The newest store schema this version of pyweft reads and writes."""

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
        options.check(
            workflows=workflows,
            activities=activities,
            max_payload_bytes=max_payload_bytes,
            max_history_steps=max_history_steps,
            activity_threads=activity_threads,
            poll_interval=poll_interval,
            max_cached_runs=max_cached_runs,
            version_mismatch=version_mismatch,
            on_nondeterminism=on_nondeterminism,
            ownership=ownership,
            role=role,
            engine_id=engine_id,
            detect_second_instance=detect_second_instance,
            retention_batch_size=retention_batch_size,
        )
        self._max_history_steps = max_history_steps
        self._serve_queues = options.serve_queues(serve_queues)
        self._tasks: TaskDispatcher | None = None
        self._interceptors = InterceptorChain.build(check_interceptors(interceptors))
        kept = options.retention_rules(retention)
        sweep_every = parse_duration(retention_sweep_interval, field="retention_sweep_interval")
        store, self._owns_storage = options.open_store(storage, sqlite_synchronous)
        self._auto_ownership = ownership is None
        ownership = resolve_ownership(ownership, store)
        self.clock: Clock = clock or SystemClock()
        self.codec: PayloadCodec = codec or DefaultPayloadCodec()
        self.max_payload_bytes = max_payload_bytes
        self._core = EngineCore(
            storage=store,
            clock=self.clock,
            codec=self.codec,
            max_payload_bytes=max_payload_bytes,
            poll_interval=float(poll_interval),
            version_mismatch=version_mismatch,
            on_nondeterminism=on_nondeterminism,
        )
        self._core.residency.max_cached_runs = max_cached_runs
        for fn in workflows:
            self.register_workflow(fn)
        for fn in activities:
            self.register_activity(fn)
        self._init_queues(queues)
        self._recover = recover and role == "engine"
        self._core.drives = role == "engine"
        self._activity_threads = activity_threads
        self._executor: ThreadPoolExecutor | None = None
        self.instance_id = new_instance_id()
        """Identifies this engine in this process (lease records, claims, heartbeats)."""
        self._engine_id = engine_id
        self.incarnation: Incarnation | None = None
        """Who this engine is in lease and claim records; set when it opens."""
        self.role = role
        """``"engine"`` drives runs; ``"client"`` only reads, starts and sends messages."""
        self._ownership_options = {
            "lease_ttl": parse_duration(lease_ttl, field="lease_ttl"),
            "lease_renew_interval": parse_duration(
                lease_renew_interval, field="lease_renew_interval"
            ),
            "lease_wait_timeout": parse_duration(lease_wait_timeout, field="lease_wait_timeout"),
            "poll_interval": min(1.0, float(poll_interval)),
            "claim_ttl": parse_duration(claim_ttl, field="claim_ttl"),
            "claim_renew_interval": parse_duration(
                claim_renew_interval, field="claim_renew_interval"
            ),
        }
        self._stall_threshold = parse_optional_duration(stall_threshold, field="stall_threshold")
        if self._stall_threshold is not None and self._stall_threshold <= 0:
            raise ConfigurationError(
                f"stall_threshold must be a positive duration (or None to turn the event-loop "
                f"stall warning off), got {stall_threshold!r}"
            )
        self._stalls: StallMonitor | None = None
        self.ownership = ownership
        """The ownership mode in use. ``ownership=None`` (the default) picks the mode the
        store already records, else ``"none"`` on SQLite and memory and
        ``"workflow-lease"`` on PostgreSQL; known for sure once the engine is open."""
        self._store_lock: StoreFileLock | None = None
        self._lease: LeaseManager | None = None
        self._detect_second_instance = detect_second_instance
        self._use_ownership(ownership)
        self._claim_timer: TimerHandle | None = None
        self._closing: asyncio.Future[None] | None = None
        self._claim_task: asyncio.Task[None] | None = None  # the reclaim scan
        self._renew_task: asyncio.Task[None] | None = None
        self._detector = (
            SecondInstanceDetector(
                store,
                self.clock,
                self.instance_id,
                interval_s=parse_duration(
                    second_instance_interval, field="second_instance_interval"
                ),
            )
            if detect_second_instance
            else None
        )
        self._wakeups = WakeupPoller(self._core, adopt_orphans=self._recover)
        self._sweeper = maintenance.RetentionSweeper(
            self._core, kept, sweep_every, retention_batch_size
        )
        self._signals: SignalSender | None = None
        self._updates: UpdateClient | None = None
        self._reviews: ReviewDesk | None = None
        # Made on first use: an engine (or CLI client) that never touches schedules or
        # shared state does not import them (process start-up time).
        self._schedules: Schedules | None = None
        self._state: StateAdmin | None = None
        self.schema_version: int | None = None
        """The store's schema version, known once the engine is open."""
        self.store_was_new = False
        """True when this engine found an empty store and initialised it."""
        self.visibility = self._core.visibility

    # --- registration ---------------------------------------------------------------

    def register_workflow(self, fn: Callable[..., Any]) -> WorkflowDefinition:
        """Register a workflow function (decorated with ``@workflow`` or a plain ``async def``)."""
        if is_activity(fn):
            raise DefinitionError(
                f"{options.named(fn)} is an @activity, not a workflow: pass it in "
                "Engine(activities=[...]) (or call engine.register_activity) and run it from a "
                "workflow with ctx.run"
            )
        definition = workflow_definition_of(fn) or workflow_definition_of(workflow(fn))
        assert definition is not None
        existing = self._core.workflows.get(definition.name)
        if existing is not None and existing.fn is not definition.fn:
            raise DefinitionError(
                f"two different workflows are registered under the name {definition.name!r}; "
                "give one of them @workflow(name=...)"
            )
        self._core.workflows[definition.name] = definition
        return definition

    def register_activity(self, fn: Callable[..., Any]) -> ActivityDefinition:
        """Register an activity engine-wide so workflows can call it by name."""
        if workflow_definition_of(fn) is not None:
            raise DefinitionError(
                f"{options.named(fn)} is a @workflow, not an activity: pass it in "
                "Engine(workflows=[...]) (or call engine.register_workflow) and start it with "
                "engine.start or ctx.start_child"
            )
        definition = activity_definition_of(fn)
        existing = self._core.activities.get(definition.name)
        if existing is not None and existing.fn is not definition.fn:
            raise DefinitionError(
                f"two different activities are registered under the name {definition.name!r}; "
                "give one of them @activity(name=...)"
            )
        self._core.activities[definition.name] = definition
        return definition

    @property
    def storage(self) -> Storage:
        return self._core.storage

    @property
    def workflow_types(self) -> builtins.list[str]:
        return sorted(self._core.workflows)

    def registered_versions(self) -> dict[str, str]:
        """``{workflow type: version}`` of every registered workflow."""
        return {name: d.version for name, d in sorted(self._core.workflows.items())}

    # --- lifecycle --------------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()

    async def open(self) -> None:
        """Check the store's schema and, unless ``recover=False``, resume every running run."""
        core = self._core
        if core.state != "new":
            raise EngineClosedError("an Engine can be opened only once; create a new one")
        caps = core.storage.capabilities
        if not (caps.atomic_batch and caps.conditional_batch):
            raise StorageCapabilityError(
                f"{type(core.storage).__name__} does not declare atomic and conditional "
                "batches; the engine needs both to commit steps safely"
            )
        self.incarnation = current(self.engine_id, self.instance_id)
        if self._auto_ownership:
            stored = await stored_mode(core.storage)
            if stored in MODES and stored != self.ownership:
                self._use_ownership(stored)  # join the protocol the store already uses
        if self._store_lock is not None:
            # First of all: a second engine on this file must not write a single byte.
            try:
                self._store_lock.acquire(engine_id=self.engine_id, instance_id=self.instance_id)
            except BaseException:
                core.state = "closed"
                if self._owns_storage:
                    await core.storage.close()
                raise
        try:
            await self._open(core)
        except BaseException:
            if self._store_lock is not None and core.state == "new":
                self._store_lock.release()  # shutdown() releases it once the engine opened
            raise

    async def _open(self, core: EngineCore) -> None:
        await self._check_schema()
        if self.role == "engine":
            await check_mode_marker(core.storage, self.ownership, self.clock.now())
        if self._lease is not None:
            self._lease.identity = self.incarnation
            await self._lease.acquire()  # before recovery: never drive runs we do not own
            core.committer.fence = self._lease
        if core.claims is not None:
            core.claims.identity = self.incarnation
            core.committer.fence = core.claims
        self._executor = ThreadPoolExecutor(
            max_workers=self._activity_threads, thread_name_prefix="pyweft-activity"
        )
        core.cancel_run = functools.partial(commands.cancel, core)
        core.services = RunServices(
            storage=core.storage,
            committer=core.committer,
            clock=self.clock,
            codec=self.codec,
            executor=self._executor,
            activities=core.activities,
            max_payload_bytes=self.max_payload_bytes,
            max_history_steps=self._max_history_steps,
            events=core.events,
            poll_interval=core.poll_interval,
            children=core,
            updates=UPDATE_HOOKS,
            claims=core.claims,
            on_idle=core.residency.idle,
            on_nondeterminism=core.on_nondeterminism,
            interceptors=self._interceptors,
        )
        # Activities on queues this engine does not serve run on worker processes. Every
        # engine has the dispatcher, serving every queue or not: a run it recovers may
        # have an attempt another engine already wrote as a task, which must be waited
        # for, never run again here. It starts listening only once a task is involved.
        self._tasks = TaskDispatcher(
            core.storage,
            self._serve_queues,
            poll_interval=core.poll_interval,
            clock_now=self.clock.now,
        )
        core.services.tasks = self._tasks
        if self._serve_queues is not None:
            await self._tasks.start()
        core.committer.on_commit = commit_observer(self._interceptors)
        # Park markers need one engine driving every run: not under workflow-lease.
        core.residency.markers = core.claims is None
        self._signals = SignalSender(core.services, core.runs, core.residency)
        self._updates = UpdateClient(core.services, core.runs, core.residency)
        core.services.on_update_response = self._updates.on_response
        self._reviews = ReviewDesk(core.services, core.runs, core.residency)
        # After a storage failure, resumed runs are followed by a sweep for runs nobody
        # drives here: the reclaim scan under workflow-lease, else recovery (if enabled).
        if core.claims is not None:
            core.redriver = Redriver(
                core.resume_run, core.probe_store, core.reclaim if self._recover else None
            )
        elif self._recover:
            core.redriver = Redriver(
                core.resume_run, core.probe_store, lambda: commands.recover_all(core)
            )
        core.state = "open"
        try:
            if self._recover:
                if core.residency.markers:
                    await core.residency.load_parked()
                await self.recover_all()
                core.residency.warm_up()
        except BaseException:
            await self.shutdown()
            raise
        if self.role == "engine":
            self._sweeper.start()
            if not getattr(core.storage, "read_only", False):
                from pyweft.engine.schedules import declared

                await declared.reconcile(self.schedules, core.workflows)
                self.schedules.firing.start()
        if not getattr(core.storage, "read_only", False):
            await self._wakeups.start()  # it tidies wake markers: nothing to do read-only
        await self._open_queues()
        if core.claims is not None:
            self._arm_claims()
        self._watch_stalls()
        if self._detector is not None:
            self._detector.start()

    async def _check_schema(self) -> None:
        storage, committer = self._core.storage, self._core.committer
        raw = await storage.get(keys.SCHEMA_KEY)
        if raw is None and getattr(storage, "read_only", False):
            return  # a read-only look at a store no engine has initialised yet
        if raw is None:
            value = str(keys.SCHEMA_VERSION).encode()
            await committer.commit(
                [Put(key=keys.SCHEMA_KEY, value=value)], [Expect(key=keys.SCHEMA_KEY, value=None)]
            )
            self.schema_version, self.store_was_new = keys.SCHEMA_VERSION, True
            return
        try:
            version = int(raw.decode())
        except ValueError as exc:
            raise SchemaVersionError(f"the store's schema marker is unreadable: {raw!r}") from exc
        if version > keys.SCHEMA_VERSION:
            raise SchemaVersionError(
                f"the store was written by a newer pyweft (schema {version}); this version reads "
                f"schema {keys.SCHEMA_VERSION}. Upgrade pyweft to open it."
            )
        self.schema_version = version

    async def shutdown(self) -> None:
        """Stop every run (they stay resumable) and release the store. Idempotent: a call
        made while a shutdown is under way waits for it to finish."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._shutdown())
        await asyncio.shield(self._closing)

    async def _shutdown(self) -> None:
        core = self._core
        core.state = "closed"
        if self._schedules is not None:
            await self._schedules.firing.stop()
        await core.redriver.close()
        await self._close_queues()
        # Stop taking runs over first, so no reclaim launches a run after the others stop.
        if self._claim_timer is not None:
            self._claim_timer.cancel()
        if self._claim_task is not None:
            await asyncio.gather(self._claim_task, return_exceptions=True)
        if self._detector is not None:
            await self._detector.stop()
        if self._stalls is not None:
            await self._stalls.stop()
        self._sweeper.stop()
        await self._wakeups.stop()
        await core.residency.close()
        if self._tasks is not None:
            await self._tasks.stop()
        for timer in core.pending_timers.values():
            timer.cancel()
        core.pending_timers.clear()
        core.events.close()
        for task in list(core.loading.values()):
            task.cancel()
        runs = list(core.runs.values())
        for run in runs:
            run.stop()  # a run busy committing a result finishes that commit first
        tasks = [r.task for r in runs if r.task is not None] + list(core.loading.values())
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=_SHUTDOWN_GRACE_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if core.claims is not None:
            await core.claims.release_all()
        if self._lease is not None:
            await self._lease.release()
        if self._owns_storage:
            await core.storage.close()
        if self._store_lock is not None:
            self._store_lock.release()

    def _watch_stalls(self) -> None:
        """Warn about event-loop stalls; stop a run whose activity keeps costing this
        engine its claims or lease (see ``engine/stalls.py``)."""
        if self._stall_threshold is None or self.role != "engine":
            return
        opts = self._ownership_options
        at_risk: float | None = None
        if self._core.claims is not None:
            at_risk = opts["claim_ttl"] - 2 * opts["claim_renew_interval"]
        elif self._lease is not None:
            at_risk = opts["lease_ttl"] - 2 * opts["lease_renew_interval"]
        self._stalls = StallMonitor(
            self._core, threshold_s=self._stall_threshold, at_risk_s=at_risk
        )
        self._stalls.start()

    def stats(self) -> EngineStats:
        """Counters of this engine since it opened: runs driven, storage failures that
        stopped runs, runs resumed after them, runs waiting for the store right now."""
        core = self._core
        return EngineStats(
            runs_driven=len(core.runs),
            storage_failures=core.redriver.failures,
            redriven=core.redriver.redriven,
            stranded=core.redriver.stranded_count,
        )

    def metrics_text(self) -> str:
        """Prometheus text: this engine's counters and lease, and what its interceptors
        measure (``MetricsInterceptor``; see docs/guides/observability.md)."""
        return prometheus_text(self.stats(), self.lease_health(), self._interceptors)

    # --- starting runs ------------------------------------------------------------------

    @overload
    async def start(
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
    async def start(
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
    async def start(
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
        """Create a run and start driving it. Returns once the run is durably stored.

        ``id`` defaults to a random UUID. A second ``start`` with the same
        ``id`` raises :class:`WorkflowAlreadyExistsError` (``on_conflict="fail"``)
        or returns the existing run's handle (``"use_existing"``). With
        ``idempotency_key``, the first call creates the run and every later call
        with that key returns the same run (a key whose run was purged is spent:
        :class:`IdempotencyKeySpentError`). ``execution_timeout`` ends an
        overrunning run as ``timed_out``. ``start_delay`` / ``start_at`` create
        a ``pending`` run that starts later (and survives restarts). ``tags``
        label the run for ``list(tags=...)``; ``attributes`` are its first search
        attributes (as ``ctx.set_attributes``), indexed in the same write.
        ``headers`` (a small ``str`` map, never secrets) travel with the run to its
        activities and children.
        """
        services = self._core.services_or_raise()
        signals = self._signals
        assert signals is not None
        refuse_activity_as_workflow(wf, "engine.start")

        async def create(heads: dict[str, str]) -> str:
            made, _ = await creation.create(
                self._core,
                signals,
                wf,
                args,
                id=id,
                idempotency_key=idempotency_key,
                on_conflict=on_conflict,
                execution_timeout=execution_timeout,
                start_delay=start_delay,
                start_at=start_at,
                tags=tags,
                attributes=attributes,
                headers=heads,
            )
            return made

        kind = wf if isinstance(wf, str) else getattr(wf, "__name__", str(wf))
        workflow_id = await chain.start(services.interceptors, kind, args, id, headers, create)
        return WorkflowHandle(self, workflow_id)

    @overload
    def get_handle(self, workflow_id: str) -> WorkflowHandle[Any]: ...
    @overload
    def get_handle(self, workflow_id: str, result_type: type[R]) -> WorkflowHandle[R]: ...
    def get_handle(self, workflow_id: str, result_type: object = None) -> WorkflowHandle[Any]:
        """A handle to an existing run. Does no I/O; errors surface when it is used.

        ``result_type`` only tells type checkers what ``result()`` returns
        (``get_handle(id, Receipt)`` is a ``WorkflowHandle[Receipt]``); the
        value itself is decoded with the registered workflow's return annotation.
        """
        check_result_type(result_type, "get_handle")
        return WorkflowHandle(self, workflow_id)

    # --- what this engine drives ----------------------------------------------------

    def quiescent(self) -> bool:
        """True when nothing here moves until time passes or a message arrives: every run
        this engine drives is parked in a wait, none is loading, no schedule is firing.
        The test kit skips virtual time only then (``pyweft.testing.TestEnv``)."""
        core = self._core
        return (
            not core.loading
            and not core.adopting
            and not (self._schedules is not None and self._schedules.firing.busy)
            and not (self._dispatcher is not None and self._dispatcher.busy)
            and all(run.waiting for run in core.runs.values())
        )

    def is_running_here(self, workflow_id: str) -> bool:
        """True when this engine is currently driving the run (in memory, or evicted from
        memory while it waits: it is replayed when something concerns it)."""
        core = self._core
        return core.driven_here(workflow_id) or core.residency.reviving(workflow_id)
