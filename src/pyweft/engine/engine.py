"""``Engine``: the public facade that starts, drives, recovers and inspects runs."""

from __future__ import annotations

import asyncio
import builtins
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Literal

import msgspec

from pyweft.clock import Clock, SystemClock
from pyweft.codec import DefaultPayloadCodec, PayloadCodec, encode_args, payload_size_error
from pyweft.definitions import (
    ActivityDefinition,
    WorkflowDefinition,
    activity_definition_of,
    workflow,
    workflow_definition_of,
)
from pyweft.engine import keys, records
from pyweft.engine.commit import Committer
from pyweft.engine.context import WorkflowContext
from pyweft.engine.handle import WorkflowHandle
from pyweft.engine.info import Page, StepInfo, WorkflowInfo
from pyweft.engine.records import TERMINAL_STATUSES, WorkflowState
from pyweft.engine.recovery import load_run, running_ids
from pyweft.engine.run import Run, RunServices
from pyweft.engine.visibility import Visibility, outcome_of
from pyweft.errors import (
    ConfigurationError,
    DefinitionError,
    EngineClosedError,
    InvalidArgumentError,
    ResultTimeoutError,
    SchemaVersionError,
    StorageCapabilityError,
    WorkflowAlreadyExistsError,
    WorkflowNotFoundError,
    WorkflowNotRegisteredError,
)
from pyweft.storage.base import Delete, Expect, Op, Put, Storage
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
            committer=self._committer,
            clock=self.clock,
            codec=self.codec,
            executor=self._executor,
            activities=self._activities,
            max_payload_bytes=self.max_payload_bytes,
        )
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
    ) -> WorkflowHandle:
        """Create a run and start driving it. Returns once the run is durably stored.

        ``id`` defaults to a random UUID. A second ``start`` with the same
        ``id`` raises :class:`WorkflowAlreadyExistsError` (``on_conflict="fail"``)
        or returns the existing run's handle (``"use_existing"``). With
        ``idempotency_key``, the first call creates the run and every later call
        with that key returns the same run.
        """
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
        state = WorkflowState(
            id=workflow_id,
            type=definition.name,
            version=definition.version,
            status="running",
            args=payload,
            created_at=now,
            updated_at=now,
            idempotency_key=idempotency_key,
        )
        raw = records.encode(state)
        ops: list[Op] = [Put(key=keys.wf(workflow_id), value=raw)]
        ops += [
            Put(key=k, value=b"")
            for k in keys.index_keys(workflow_id, definition.name, "running", now)
        ]
        conditions = [Expect(key=keys.wf(workflow_id), value=None)]
        if idempotency_key is not None:
            idem = keys.idempotency(idempotency_key)
            ops.append(Put(key=idem, value=workflow_id.encode()))
            conditions.append(Expect(key=idem, value=None))
        if not await self._committer.commit(ops, conditions):
            return await self._start_conflict(workflow_id, idempotency_key, on_conflict)
        run = Run(services, definition, state, raw, {}, {})
        self._launch(run)
        return WorkflowHandle(self, workflow_id)

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
                    return outcome_of(state, self.codec, self._workflows)
                except TimeoutError:
                    raise _result_timeout(workflow_id, timeout) from None
                except EngineClosedError:
                    self._services_or_raise()
                    continue
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

        Cancelling a finished run does nothing.
        """
        self._services_or_raise()
        await self._settled(workflow_id)
        run = self._runs.get(workflow_id)
        if run is not None:
            await run.request_cancel()
            return
        raw, state = await self.visibility.state_raw(workflow_id)
        if state.status in TERMINAL_STATUSES:
            return
        # Nobody drives this run here: end it directly.
        new = msgspec.structs.replace(
            state, status="cancelled", cancel_requested=True, updated_at=self.clock.now()
        )
        ops: list[Op] = [Put(key=keys.wf(workflow_id), value=records.encode(new))]
        for k in keys.status_index_keys(state.id, state.type, state.status, state.created_at):
            ops.append(Delete(key=k))
        for k in keys.status_index_keys(state.id, state.type, "cancelled", state.created_at):
            ops.append(Put(key=k, value=b""))
        if not await self._committer.commit(ops, [Expect(key=keys.wf(workflow_id), value=raw)]):
            await self.cancel(workflow_id)  # it changed under us; look again

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
        services = self._services_or_raise()
        started = time.perf_counter()
        ids = [i for i in await running_ids(self._storage) if i not in self._runs]
        resumed = 0

        async def resume(workflow_id: str) -> None:
            nonlocal resumed
            try:
                loaded = await load_run(self._storage, workflow_id)
                if loaded is None or loaded.state.status != "running":
                    return
                definition = self._workflows.get(loaded.state.type)
                if definition is None:
                    log.warning(
                        "run %s has workflow type %r, which is not registered; leaving it for "
                        "an engine that has it",
                        workflow_id,
                        loaded.state.type,
                    )
                    return
                run = Run(
                    services,
                    definition,
                    loaded.state,
                    loaded.state_raw,
                    loaded.journal,
                    loaded.pendings,
                )
                self._launch(run)
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

    async def history(self, workflow_id: str) -> builtins.list[StepInfo]:
        """Every committed step of a run in step order, plus steps still open."""
        self._services_or_raise()
        return await self.visibility.history(workflow_id)

    def is_running_here(self, workflow_id: str) -> bool:
        """True when this engine is currently driving the run."""
        return workflow_id in self._runs


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
