"""``Engine``: the public facade that starts, drives, recovers and inspects runs."""

from __future__ import annotations

import asyncio
import builtins
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from types import TracebackType
from typing import Any, Literal

import msgspec

from pyweft.clock import Clock, SystemClock, TimerHandle
from pyweft.codec import DefaultPayloadCodec, PayloadCodec, encode_args, payload_size_error
from pyweft.definitions import (
    ActivityDefinition,
    WorkflowDefinition,
    activity_definition_of,
    workflow,
    workflow_definition_of,
)
from pyweft.durations import parse_optional_duration
from pyweft.engine import keys, lifecycle, records
from pyweft.engine.commit import Committer
from pyweft.engine.context import WorkflowContext
from pyweft.engine.events import EventBus, WorkflowEvent
from pyweft.engine.handle import WorkflowHandle
from pyweft.engine.info import Page, WorkflowInfo, to_datetime
from pyweft.engine.records import TERMINAL_STATUSES, WorkflowState
from pyweft.engine.recovery import ids_with_status, load_run
from pyweft.engine.reviews import ReviewDesk, ReviewInfo
from pyweft.engine.run import Run, RunServices, status_change_ops
from pyweft.engine.signals import SignalSender
from pyweft.engine.updates import OMITTED, UpdateClient
from pyweft.engine.visibility import History, Visibility, outcome_of
from pyweft.errors import (
    ConfigurationError,
    DefinitionError,
    EngineClosedError,
    InvalidArgumentError,
    QueryNotFoundError,
    QueryUnavailableError,
    ResultTimeoutError,
    SchemaVersionError,
    StorageCapabilityError,
    WorkflowAlreadyExistsError,
    WorkflowNotFoundError,
    WorkflowNotRegisteredError,
    WorkflowTerminalError,
)
from pyweft.storage.base import Expect, Op, Put, Storage
from pyweft.storage.factory import open_storage

log = logging.getLogger("pyweft.engine")

DEFAULT_MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
_MAX_ID_BYTES = 255


class Engine:
    """Runs durable workflows on a store. Use ``async with Engine(...) as engine``.

    ``storage`` is a URL (``sqlite:///app.db``, ``memory://``), a
    :class:`~pyweft.storage.Storage` instance, or ``None`` for SQLite at
    ``$PYWEFT_DATABASE_URL`` or ``./pyweft.db``. Entering the engine recovers
    every run an earlier process left running unless ``recover=False``.
    """

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
        activity_threads: int = 32,
        sqlite_synchronous: Literal["FULL", "NORMAL"] = "FULL",
        poll_interval: float = 1.0,
    ) -> None:
        if type(max_payload_bytes) is not int or max_payload_bytes < 1:
            raise ConfigurationError(
                f"max_payload_bytes must be a positive int, got {max_payload_bytes!r}"
            )
        if type(activity_threads) is not int or activity_threads < 1:
            raise ConfigurationError(
                f"activity_threads must be a positive int, got {activity_threads!r}"
            )
        if isinstance(storage, str) or storage is None:
            self._storage = open_storage(storage, sqlite_synchronous=sqlite_synchronous)
            self._owns_storage = True
        elif isinstance(storage, Storage):
            self._storage = storage
            self._owns_storage = False
        else:
            raise ConfigurationError(
                f"storage must be a URL string, a Storage instance or None, got {storage!r}"
            )
        self._workflows: dict[str, WorkflowDefinition] = {}
        self._activities: dict[str, ActivityDefinition] = {}
        for fn in workflows:
            self.register_workflow(fn)
        for fn in activities:
            self.register_activity(fn)
        self._recover = recover
        self.clock: Clock = clock or SystemClock()
        self.codec: PayloadCodec = codec or DefaultPayloadCodec()
        self.max_payload_bytes = max_payload_bytes
        self._activity_threads = activity_threads
        self._executor: ThreadPoolExecutor | None = None
        self._committer = Committer(self._storage)
        self._services: RunServices | None = None
        self._runs: dict[str, Run] = {}
        self._loading: dict[str, asyncio.Task[None]] = {}
        self._state: Literal["new", "open", "closed"] = "new"
        if not isinstance(poll_interval, int | float) or not 0 < poll_interval <= 60:
            raise ConfigurationError(
                f"poll_interval must be a number of seconds in (0, 60], got {poll_interval!r}"
            )
        self._poll_interval = float(poll_interval)
        self._events = EventBus()
        self._pending_timers: dict[str, TimerHandle] = {}
        self._signals: SignalSender | None = None
        self._updates: UpdateClient | None = None
        self._reviews: ReviewDesk | None = None
        self.schema_version: int | None = None
        """The store's schema version, known once the engine is open."""
        self.store_was_new = False
        """True when this engine found an empty store and initialised it."""
        self.visibility = Visibility(self._storage, self.codec, self._workflows)

    # --- registration ---------------------------------------------------------------

    supported_schema_version: int = keys.SCHEMA_VERSION
    """The newest store schema this version of pyweft reads and writes."""

    def register_workflow(self, fn: Callable[..., Any]) -> WorkflowDefinition:
        """Register a workflow function (decorated with ``@workflow`` or a plain ``async def``)."""
        definition = workflow_definition_of(fn) or workflow_definition_of(workflow(fn))
        assert definition is not None
        existing = self._workflows.get(definition.name)
        if existing is not None and existing.fn is not definition.fn:
            raise DefinitionError(
                f"two different workflows are registered under the name {definition.name!r}; "
                "give one of them @workflow(name=...)"
            )
        self._workflows[definition.name] = definition
        return definition

    def register_activity(self, fn: Callable[..., Any]) -> ActivityDefinition:
        """Register an activity engine-wide so workflows can call it by name."""
        definition = activity_definition_of(fn)
        existing = self._activities.get(definition.name)
        if existing is not None and existing.fn is not definition.fn:
            raise DefinitionError(
                f"two different activities are registered under the name {definition.name!r}; "
                "give one of them @activity(name=...)"
            )
        self._activities[definition.name] = definition
        return definition

    @property
    def storage(self) -> Storage:
        return self._storage

    @property
    def workflow_types(self) -> list[str]:
        return sorted(self._workflows)

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
        if self._state != "new":
            raise EngineClosedError("an Engine can be opened only once; create a new one")
        caps = self._storage.capabilities
        if not (caps.atomic_batch and caps.conditional_batch):
            raise StorageCapabilityError(
                f"{type(self._storage).__name__} does not declare atomic and conditional batches; "
                "the engine needs both to commit steps safely"
            )
        await self._check_schema()
        self._executor = ThreadPoolExecutor(
            max_workers=self._activity_threads, thread_name_prefix="pyweft-activity"
        )
        self._services = RunServices(
            storage=self._storage,
            committer=self._committer,
            clock=self.clock,
            codec=self.codec,
            executor=self._executor,
            activities=self._activities,
            max_payload_bytes=self.max_payload_bytes,
            events=self._events,
            poll_interval=self._poll_interval,
        )
        self._signals = SignalSender(self._services, self._runs)
        self._updates = UpdateClient(self._services, self._runs)
        self._services.on_update_response = self._updates.on_response
        self._reviews = ReviewDesk(self._services, self._runs)
        self._state = "open"
        if self._recover:
            await self.recover_all()

    async def _check_schema(self) -> None:
        raw = await self._storage.get(keys.SCHEMA_KEY)
        if raw is None:
            value = str(keys.SCHEMA_VERSION).encode()
            await self._committer.commit(
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
        """Stop every run (they stay resumable) and release the store. Idempotent."""
        if self._state == "closed":
            return
        self._state = "closed"
        for timer in self._pending_timers.values():
            timer.cancel()
        self._pending_timers.clear()
        self._events.close()
        for task in list(self._loading.values()):
            task.cancel()
        runs = list(self._runs.values())
        for run in runs:
            run.stopping = True
            if run.task is not None:
                run.task.cancel()
        tasks = [r.task for r in runs if r.task is not None] + list(self._loading.values())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self._owns_storage:
            await self._storage.close()

    def _services_or_raise(self) -> RunServices:
        if self._state != "open" or self._services is None:
            raise EngineClosedError(
                "the engine is not running: use `async with Engine(...) as engine:` "
                "(or await engine.open()) before calling it"
            )
        return self._services

    # --- starting runs ------------------------------------------------------------------

    def _definition(self, wf: Callable[..., Any] | str) -> WorkflowDefinition:
        name = wf if isinstance(wf, str) else getattr(workflow_definition_of(wf), "name", None)
        definition = self._workflows.get(name) if name is not None else None
        if definition is None or (not isinstance(wf, str) and definition.fn is not wf):
            shown = name or getattr(wf, "__qualname__", repr(wf))
            raise WorkflowNotRegisteredError(
                f"workflow {shown!r} is not registered with this engine (registered: "
                f"{', '.join(sorted(self._workflows)) or 'none'}). Pass it in "
                "Engine(workflows=[...]) or call engine.register_workflow().",
                workflow_type=str(shown),
            )
        return definition

    async def start(
        self,
        wf: Callable[..., Any] | str,
        *args: Any,
        id: str | None = None,
        idempotency_key: str | None = None,
        on_conflict: Literal["fail", "use_existing"] = "fail",
        execution_timeout: Any = None,
        start_delay: Any = None,
        start_at: datetime | float | None = None,
    ) -> WorkflowHandle:
        """Create a run and start driving it. Returns once the run is durably stored.

        ``id`` defaults to a random UUID. A second ``start`` with the same
        ``id`` raises :class:`WorkflowAlreadyExistsError` (``on_conflict="fail"``)
        or returns the existing run's handle (``"use_existing"``). With
        ``idempotency_key``, the first call creates the run and every later call
        with that key returns the same run. ``execution_timeout`` ends an
        overrunning run as ``timed_out``. ``start_delay`` / ``start_at`` create
        a ``pending`` run that starts later (and survives restarts).
        """
        return (
            await self._create(
                wf,
                args,
                id=id,
                idempotency_key=idempotency_key,
                on_conflict=on_conflict,
                execution_timeout=execution_timeout,
                start_delay=start_delay,
                start_at=start_at,
            )
        )[0]

    async def _create(
        self,
        wf: Callable[..., Any] | str,
        args: tuple[Any, ...],
        *,
        id: str | None,
        idempotency_key: str | None = None,
        on_conflict: str = "fail",
        execution_timeout: Any = None,
        start_delay: Any = None,
        start_at: datetime | float | None = None,
        first_signal: tuple[str, object, str | None] | None = None,
    ) -> tuple[WorkflowHandle, bool]:
        """Build and commit a run's create batch. Returns (handle, created)."""
        services = self._services_or_raise()
        definition = self._definition(wf)
        if on_conflict not in ("fail", "use_existing"):
            raise InvalidArgumentError(
                f"on_conflict must be 'fail' or 'use_existing', got {on_conflict!r}"
            )
        if id is not None and idempotency_key is not None:
            raise InvalidArgumentError(
                "pass either id= or idempotency_key=, not both: an idempotency key chooses "
                "the run itself"
            )
        workflow_id = _check_id(id, "id") if id is not None else str(uuid.uuid4())
        if idempotency_key is not None:
            _check_id(idempotency_key, "idempotency_key")
        payload = encode_args(self.codec, args)
        if len(payload) > self.max_payload_bytes:
            raise payload_size_error(
                len(payload), self.max_payload_bytes, what=f"arguments of {definition.name!r}"
            )
        now = self.clock.now()
        timeout_s = parse_optional_duration(execution_timeout, field="execution_timeout")
        begin = _start_time(now, start_delay, start_at)
        status = "pending" if begin is not None and begin > now else "running"
        state = WorkflowState(
            id=workflow_id,
            type=definition.name,
            version=definition.version,
            status=status,
            args=payload,
            created_at=now,
            updated_at=now,
            idempotency_key=idempotency_key,
            start_at=begin if status == "pending" else None,
            deadline=None if timeout_s is None else max(now, begin or now) + timeout_s,
        )
        raw = records.encode(state)
        ops: list[Op] = [Put(key=keys.wf(workflow_id), value=raw)]
        ops += [
            Put(key=k, value=b"")
            for k in keys.index_keys(workflow_id, definition.name, status, now)
        ]
        conditions = [Expect(key=keys.wf(workflow_id), value=None)]
        if idempotency_key is not None:
            idem = keys.idempotency(idempotency_key)
            ops.append(Put(key=idem, value=workflow_id.encode()))
            conditions.append(Expect(key=idem, value=None))
        if first_signal is not None:
            assert self._signals is not None
            name, signal_payload, signal_id = first_signal
            data = self._signals.encode(signal_payload)
            signal_ops, signal_conds = self._signals.start_ops(
                workflow_id, name, data, signal_id, now
            )
            ops += signal_ops
            conditions += signal_conds
        if not await self._committer.commit(ops, conditions):
            if first_signal is not None:
                return WorkflowHandle(self, workflow_id), False
            handle = await self._start_conflict(workflow_id, idempotency_key, on_conflict)
            return handle, False
        self._emit("started", state)
        if status == "pending":
            self._arm_pending(state)
        else:
            self._launch(Run(services, definition, state, raw, {}, {}))
        return WorkflowHandle(self, workflow_id), True

    def _emit(self, kind: Any, state: WorkflowState, **data: Any) -> None:
        if self._events.active:
            self._events.emit(
                WorkflowEvent(
                    kind=kind,
                    workflow_id=state.id,
                    workflow_type=state.type,
                    at=to_datetime(self.clock.now()),
                    data=data,
                )
            )

    def _arm_pending(self, state: WorkflowState) -> None:
        """Start a ``pending`` run when its start time comes."""
        old = self._pending_timers.pop(state.id, None)
        if old is not None:
            old.cancel()

        def due() -> None:
            self._pending_timers.pop(state.id, None)
            if self._state == "open":
                asyncio.get_running_loop().create_task(self._begin_pending(state.id))

        self._pending_timers[state.id] = self.clock.call_at(state.start_at or 0.0, due)

    async def _begin_pending(self, workflow_id: str) -> None:
        try:
            new, _ = await lifecycle.transition(
                self._storage,
                self._committer,
                workflow_id,
                frozenset({"pending"}),
                self.clock.now(),
                status="running",
                start_at=None,
            )
            if new is not None and workflow_id not in self._runs:
                await self._resume_run(workflow_id)
        except Exception:
            log.exception("could not start pending run %s", workflow_id)

    async def _start_conflict(
        self, workflow_id: str, idempotency_key: str | None, on_conflict: str
    ) -> WorkflowHandle:
        if idempotency_key is not None:
            existing = await self._storage.get(keys.idempotency(idempotency_key))
            if existing is not None:
                return WorkflowHandle(self, existing.decode())
            raise WorkflowAlreadyExistsError(
                f"a run with the generated id {workflow_id!r} already exists; retry the start",
                workflow_id=workflow_id,
            )
        if on_conflict == "use_existing":
            return WorkflowHandle(self, workflow_id)
        raise WorkflowAlreadyExistsError(
            f"a workflow run with id {workflow_id!r} already exists; choose another id or pass "
            "on_conflict='use_existing' to get its handle",
            workflow_id=workflow_id,
        )

    def _launch(self, run: Run) -> None:
        self._runs[run.id] = run
        run.task = asyncio.get_running_loop().create_task(
            self._drive(run), name=f"pyweft-run:{run.id}"
        )

    async def _drive(self, run: Run) -> None:
        try:
            await run.drive(WorkflowContext)
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # a storage failure or a bug: keep the run resumable
            if not run.stopping:
                log.exception("workflow %s stopped without finishing: %s", run.id, exc)
        finally:
            if self._runs.get(run.id) is run:
                del self._runs[run.id]
            if not run.done.done():
                if run.state.status in TERMINAL_STATUSES:
                    run.done.set_result(run.state)
                else:
                    run.done.set_exception(
                        EngineClosedError(
                            f"workflow {run.id!r} stopped being driven by this engine before it "
                            "finished; it resumes when an engine recovers it"
                        )
                    )
                    run.done.exception()  # mark retrieved: waiters re-check storage

    def get_handle(self, workflow_id: str) -> WorkflowHandle:
        """A handle to an existing run. Does no I/O; errors surface when it is used."""
        return WorkflowHandle(self, workflow_id)

    # --- results, cancel, recovery --------------------------------------------------------

    async def result(self, workflow_id: str, *, timeout: float | None = None) -> Any:
        """Wait for a run to finish; return its result or raise its failure."""
        self._services_or_raise()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        delay = 0.005
        while True:
            await self._settled(workflow_id)
            run = self._runs.get(workflow_id)
            if run is not None:
                remaining = None if deadline is None else max(0.0, deadline - loop.time())
                try:
                    async with asyncio.timeout(remaining):
                        state = await asyncio.shield(run.done)
                except TimeoutError:
                    raise _result_timeout(workflow_id, timeout) from None
                except EngineClosedError:
                    self._services_or_raise()
                    continue
                # Outside the try: a WorkflowTimeoutError is a TimeoutError too.
                return outcome_of(state, self.codec, self._workflows)
            state = await self.visibility.state(workflow_id)
            if state.status in TERMINAL_STATUSES:
                return outcome_of(state, self.codec, self._workflows)
            if deadline is not None and loop.time() >= deadline:
                raise _result_timeout(workflow_id, timeout)
            # Not driven here (another process, or recover=False): poll the store.
            wait = delay if deadline is None else min(delay, max(0.0, deadline - loop.time()))
            await asyncio.sleep(wait)
            delay = min(delay * 2, 0.5)

    async def cancel(self, workflow_id: str) -> None:
        """Ask a run to stop. The workflow sees ``asyncio.CancelledError`` at its current step.

        Works for running, pending and suspended runs; cancelling a finished
        run does nothing.
        """
        self._services_or_raise()
        await self._settled(workflow_id)
        run = self._runs.get(workflow_id)
        if run is not None:
            await run.request_cancel()
            return
        timer = self._pending_timers.pop(workflow_id, None)
        if timer is not None:
            timer.cancel()
        new, _ = await lifecycle.transition(
            self._storage,
            self._committer,
            workflow_id,
            frozenset({"pending", "running", "suspended"}),
            self.clock.now(),
            status="cancelled",
            cancel_requested=True,
        )
        if new is not None:
            self._emit("cancelled", new)

    async def suspend(self, workflow_id: str) -> None:
        """Pause a run: it keeps its journal, is not recovered, and ``result()`` keeps waiting.

        Suspending a suspended or finished run does nothing. ``resume`` continues it.
        """
        self._services_or_raise()
        await self._settled(workflow_id)
        run = self._runs.get(workflow_id)
        if run is not None:
            run.stopping = True
            try:
                await run.write_state(
                    msgspec.structs.replace(
                        run.state, status="suspended", updated_at=self.clock.now()
                    ),
                    status_change_ops(run.state, "suspended"),
                )
            except BaseException:
                run.stopping = False
                raise
            if run.task is not None:
                run.task.cancel()
                await asyncio.gather(run.task, return_exceptions=True)
            self._emit("suspended", run.state)
            return
        timer = self._pending_timers.pop(workflow_id, None)
        if timer is not None:
            timer.cancel()
        new, _ = await lifecycle.transition(
            self._storage,
            self._committer,
            workflow_id,
            frozenset({"pending", "running"}),
            self.clock.now(),
            status="suspended",
        )
        if new is not None:
            self._emit("suspended", new)

    async def resume(self, workflow_id: str) -> None:
        """Continue a suspended run here; also re-drives a ``running`` run nobody drives.

        Raises :class:`WorkflowTerminalError` for a finished run and
        :class:`InvalidArgumentError` for a pending one (it starts on its own).
        """
        self._services_or_raise()
        await self._settled(workflow_id)
        if workflow_id in self._runs:
            return
        new, current = await lifecycle.transition(
            self._storage,
            self._committer,
            workflow_id,
            frozenset({"suspended"}),
            self.clock.now(),
            status="running",
        )
        if new is None and current.status in TERMINAL_STATUSES:
            raise WorkflowTerminalError(
                f"workflow {workflow_id!r} is {current.status}; it cannot be resumed",
                workflow_id=workflow_id,
                status=current.status,
            )
        if new is None and current.status == "pending":
            raise InvalidArgumentError(
                f"workflow {workflow_id!r} is pending; it starts on its own at its start time"
            )
        if new is not None:
            self._emit("resumed", new)
        await self._resume_run(workflow_id)

    # --- messages -----------------------------------------------------------------------

    async def signal(
        self,
        workflow_id: str,
        name: str,
        payload: Any = None,
        *,
        signal_id: str | None = None,
    ) -> None:
        """Send a signal. Returns once it is durably buffered for the run.

        With ``signal_id``, resending the same (workflow, name, id) is a no-op.
        Raises :class:`WorkflowNotFoundError` or :class:`WorkflowTerminalError`.
        """
        self._services_or_raise()
        assert self._signals is not None
        await self._signals.send(workflow_id, name, payload, signal_id)

    async def start_or_signal(
        self,
        wf: Callable[..., Any] | str,
        *args: Any,
        signal: tuple[str, Any],
        id: str | None = None,
        signal_id: str | None = None,
    ) -> tuple[WorkflowHandle, Literal["started", "signalled"]]:
        """Start the run with ``signal`` already buffered, or signal it if it exists.

        Creating the run and buffering its first signal is one atomic write;
        concurrent callers converge on one run.
        """
        self._services_or_raise()
        assert self._signals is not None
        if not (isinstance(signal, tuple) and len(signal) == 2):
            raise InvalidArgumentError("signal must be a (name, payload) tuple")
        name, payload = signal
        from pyweft.engine.signals import check_name, check_signal_id

        check_name(name, "signal")
        if signal_id is not None:
            check_signal_id(signal_id)
        handle, created = await self._create(
            wf, args, id=id, first_signal=(name, payload, signal_id)
        )
        if created:
            return handle, "started"
        try:
            await self._signals.send(handle.id, name, payload, signal_id)
        except WorkflowTerminalError:
            # A racing caller may have started the run with this very signal (R38).
            if signal_id is not None and await self._storage.get(
                keys.signal_accepted(handle.id, name, signal_id)
            ):
                return handle, "signalled"
            raise
        return handle, "signalled"

    async def query(self, workflow_id: str, name: str, *args: Any) -> Any:
        """Ask a live run a question; its query handler answers from memory. Writes nothing."""
        self._services_or_raise()
        await self._settled(workflow_id)
        run = self._runs.get(workflow_id)
        if run is None or run.done.done():
            state = await self.visibility.state(workflow_id)
            if state.status in TERMINAL_STATUSES:
                raise WorkflowTerminalError(
                    f"workflow {workflow_id!r} is {state.status}; queries need a live run",
                    workflow_id=workflow_id,
                    status=state.status,
                )
            raise QueryUnavailableError(
                f"workflow {workflow_id!r} is {state.status} and not driven by this engine; "
                "query the engine that runs it, or resume it here",
                workflow_id=workflow_id,
            )
        handler = run.query_handlers.get(name)
        if handler is None:
            known = ", ".join(sorted(run.query_handlers)) or "none"
            raise QueryNotFoundError(
                f"workflow {workflow_id!r} has no query {name!r} (it has: {known})",
                workflow_id=workflow_id,
                query=name,
            )
        return handler(*args)

    async def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any = OMITTED,
        *,
        timeout: Any = 5.0,
        idempotency_key: str | None = None,
    ) -> Any:
        """Send an update and wait for the workflow's answer.

        The request is persisted, then handled at the run's next step
        boundary. A validator rejection raises :class:`UpdateRejectedError`
        before anything is written. The same ``idempotency_key`` returns the
        stored answer and never applies the update twice. On timeout,
        :class:`UpdateTimeoutError` carries the ``update_id`` for
        :meth:`update_result`.
        """
        self._services_or_raise()
        assert self._updates is not None
        seconds = parse_optional_duration(timeout, field="timeout")
        return await self._updates.submit(
            workflow_id, name, payload, seconds if seconds is not None else 5.0, idempotency_key
        )

    async def update_result(self, update_id: str, *, timeout: Any = None) -> Any:
        """The answer to an earlier update, waiting up to ``timeout`` for it."""
        self._services_or_raise()
        assert self._updates is not None
        seconds = parse_optional_duration(timeout, field="timeout")
        return await self._updates.result(update_id, seconds)

    async def submit_review(
        self,
        review_id: str,
        decision: Literal["approved", "rejected", "needs_changes"],
        *,
        reviewer: str,
        feedback: str | None = None,
    ) -> None:
        """Decide a pending review. Durable when this returns; a second decision is refused."""
        self._services_or_raise()
        assert self._reviews is not None
        await self._reviews.submit(review_id, decision, reviewer, feedback)

    async def list_reviews(
        self,
        *,
        status: str | None = "pending",
        workflow_id: str | None = None,
        review_type: str | None = None,
    ) -> builtins.list[ReviewInfo]:
        """Reviews, oldest first (``status=None`` for every status)."""
        self._services_or_raise()
        assert self._reviews is not None
        return await self._reviews.list(status, workflow_id, review_type)

    def events(self, workflow_id: str | None = None) -> AsyncIterator[WorkflowEvent]:
        """Lifecycle events of every run (or one), from now on, in this process."""
        return self._events.subscribe(workflow_id)

    def run_events(self, workflow_id: str) -> AsyncIterator[WorkflowEvent]:
        """One run's events until its terminal event."""
        return self._events.subscribe(workflow_id, until_terminal=True)

    async def _settled(self, workflow_id: str) -> None:
        task = self._loading.get(workflow_id)
        if task is not None:
            await asyncio.shield(task)

    async def recover_all(self) -> int:
        """Resume every stored run that is ``running`` and not already driven here.

        Returns how many runs were resumed. Runs whose workflow type is not
        registered are left untouched (and logged) so a deploy that still has
        the code can run them.
        """
        started = time.perf_counter()
        self._services_or_raise()
        for workflow_id in await ids_with_status(self._storage, "pending"):
            if workflow_id not in self._pending_timers:
                state = await self.visibility.state(workflow_id)
                if state.status == "pending" and state.type in self._workflows:
                    self._arm_pending(state)
        ids = [i for i in await ids_with_status(self._storage, "running") if i not in self._runs]
        resumed = 0

        async def resume(workflow_id: str) -> None:
            nonlocal resumed
            try:
                if await self._resume_run(workflow_id):
                    resumed += 1
            finally:
                self._loading.pop(workflow_id, None)

        for workflow_id in ids:
            self._loading[workflow_id] = asyncio.get_running_loop().create_task(resume(workflow_id))
        tasks = [self._loading[i] for i in ids if i in self._loading]
        if tasks:
            await asyncio.gather(*tasks)
        if ids:
            log.info(
                "recovered %d run(s) in %.1f ms", resumed, (time.perf_counter() - started) * 1e3
            )
        return resumed

    async def _resume_run(self, workflow_id: str) -> bool:
        """Load a stored ``running`` run and start driving it here. False if it cannot be."""
        services = self._services_or_raise()
        loaded = await load_run(self._storage, workflow_id)
        if loaded is None or loaded.state.status != "running" or workflow_id in self._runs:
            return False
        definition = self._workflows.get(loaded.state.type)
        if definition is None:
            log.warning(
                "run %s has workflow type %r, which is not registered; leaving it for "
                "an engine that has it",
                workflow_id,
                loaded.state.type,
            )
            return False
        run = Run(
            services,
            definition,
            loaded.state,
            loaded.state_raw,
            loaded.journal,
            loaded.pendings,
            loaded.applied,
        )
        self._launch(run)
        return True

    # --- inspection -----------------------------------------------------------------------

    async def describe(self, workflow_id: str) -> WorkflowInfo:
        """The stored state of a run. Raises ``WorkflowNotFoundError`` for an unknown id."""
        self._services_or_raise()
        return await self.visibility.describe(workflow_id)

    async def list(
        self,
        *,
        status: str | None = None,
        workflow_type: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[WorkflowInfo]:
        """Runs, newest first, optionally filtered by status and/or workflow type."""
        self._services_or_raise()
        return await self.visibility.list(
            status=status, workflow_type=workflow_type, limit=limit, cursor=cursor
        )

    async def history(self, workflow_id: str) -> History:
        """A run's steps (committed and open) and its events, in order."""
        self._services_or_raise()
        return await self.visibility.history(workflow_id)

    def is_running_here(self, workflow_id: str) -> bool:
        """True when this engine is currently driving the run."""
        return workflow_id in self._runs


def _start_time(now: float, start_delay: Any, start_at: datetime | float | None) -> float | None:
    if start_delay is not None and start_at is not None:
        raise InvalidArgumentError("pass start_delay= or start_at=, not both")
    if start_delay is not None:
        delay = parse_optional_duration(start_delay, field="start_delay")
        return None if delay is None else now + delay
    if start_at is None:
        return None
    if isinstance(start_at, datetime):
        if start_at.tzinfo is None:
            raise InvalidArgumentError("start_at must be a timezone-aware datetime")
        return start_at.timestamp()
    if isinstance(start_at, int | float) and not isinstance(start_at, bool):
        return float(start_at)
    raise InvalidArgumentError(f"start_at must be an aware datetime or epoch seconds: {start_at!r}")


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or len(value.encode()) > _MAX_ID_BYTES:
        raise InvalidArgumentError(
            f"{what} must be a non-empty string of at most {_MAX_ID_BYTES} UTF-8 bytes, "
            f"got {value!r}"
        )
    return value


def _result_timeout(workflow_id: str, timeout: float | None) -> ResultTimeoutError:
    return ResultTimeoutError(
        f"workflow {workflow_id!r} did not finish within {timeout}s; it keeps running — "
        "call result() again to keep waiting",
        workflow_id=workflow_id,
    )


__all__ = ["Engine", "WorkflowNotFoundError"]
