"""The engine's shared internals: registry, live runs, launching and resuming runs.

``Engine`` (the public facade) and the feature modules (creation, control,
children, maintenance) all work through one ``EngineCore``, so that state such
as "which runs does this process drive" lives in exactly one place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Literal

from pyweft.clock import Clock, TimerHandle
from pyweft.codec import PayloadCodec, encode_args, payload_size_error
from pyweft.definitions import ActivityDefinition, WorkflowDefinition, workflow_definition_of
from pyweft.engine import keys, lifecycle, quarantine, records
from pyweft.engine.commit import Committer
from pyweft.engine.context import WorkflowContext
from pyweft.engine.events import EventBus, WorkflowEvent
from pyweft.engine.info import to_datetime
from pyweft.engine.ownership.claims import ClaimRegistry
from pyweft.engine.records import TERMINAL_STATUSES, ErrorInfo, WorkflowState
from pyweft.engine.redrive import Redriver
from pyweft.engine.residency import Residency
from pyweft.engine.run import Run, RunServices
from pyweft.engine.visibility import Visibility
from pyweft.errors import (
    EngineClosedError,
    StorageError,
    VersionMismatchError,
    WorkflowNotRegisteredError,
)
from pyweft.storage.base import Expect, Op, Put, Storage

log = logging.getLogger("pyweft.engine")


class EngineCore:
    """Everything one engine instance shares between its parts."""

    def __init__(
        self,
        *,
        storage: Storage,
        clock: Clock,
        codec: PayloadCodec,
        max_payload_bytes: int,
        poll_interval: float,
        version_mismatch: Literal["fail_run", "raise"],
    ) -> None:
        self.storage = storage
        self.clock = clock
        self.codec = codec
        self.max_payload_bytes = max_payload_bytes
        self.poll_interval = poll_interval
        self.version_mismatch = version_mismatch
        self.committer = Committer(storage)
        self.workflows: dict[str, WorkflowDefinition] = {}
        self.activities: dict[str, ActivityDefinition] = {}
        self.runs: dict[str, Run] = {}
        self.loading: dict[str, asyncio.Task[None]] = {}
        self.pending_timers: dict[str, TimerHandle] = {}
        self.events = EventBus()
        self.visibility = Visibility(storage, codec, self.workflows)
        self.services: RunServices | None = None
        self.state: Literal["new", "open", "closed"] = "new"
        self.claims: ClaimRegistry | None = None  # ownership="workflow-lease" only
        # Resumes runs a transient storage failure stopped here (Engine sets its sweep).
        self.redriver = Redriver(self.resume_run, self.probe_store, None)
        self.drives = True  # False for role="client": runs are stored, never driven here
        self.residency = Residency(self)  # idle runs evicted from memory, still ours
        self._store_news = asyncio.Event()
        self._orphans_seen: set[str] = set()  # see reclaim

    # --- notifications from the store -------------------------------------------------

    def store_news(self) -> asyncio.Event:
        """Set at the next notification from the store (see wakeups); take it before looking."""
        return self._store_news

    def heard_from_store(self) -> None:
        news, self._store_news = self._store_news, asyncio.Event()
        news.set()

    # --- guards and lookups -----------------------------------------------------------

    def services_or_raise(self) -> RunServices:
        if self.state != "open" or self.services is None:
            raise EngineClosedError(
                "the engine is not running: use `async with Engine(...) as engine:` "
                "(or await engine.open()) before calling it"
            )
        return self.services

    def definition(self, wf: Callable[..., Any] | str) -> WorkflowDefinition:
        name = wf if isinstance(wf, str) else getattr(workflow_definition_of(wf), "name", None)
        definition = self.workflows.get(name) if name is not None else None
        if definition is None or (not isinstance(wf, str) and definition.fn is not wf):
            shown = name or getattr(wf, "__qualname__", repr(wf))
            raise WorkflowNotRegisteredError(
                f"workflow {shown!r} is not registered with this engine (registered: "
                f"{', '.join(sorted(self.workflows)) or 'none'}). Pass it in "
                "Engine(workflows=[...]) or call engine.register_workflow().",
                workflow_type=str(shown),
            )
        return definition

    def emit(self, kind: Any, state: WorkflowState, **data: Any) -> None:
        if self.events.active:
            self.events.emit(
                WorkflowEvent(
                    kind=kind,
                    workflow_id=state.id,
                    workflow_type=state.type,
                    at=to_datetime(self.clock.now()),
                    data=data,
                )
            )

    async def settled(self, workflow_id: str) -> None:
        """Wait until a run being loaded by recovery is either launched or skipped."""
        task = self.loading.get(workflow_id)
        if task is not None:
            await asyncio.shield(task)

    async def resident(self, workflow_id: str) -> Run | None:
        """Like :meth:`settled`, and bring the run back into memory if it was evicted."""
        await self.settled(workflow_id)
        if self.residency.holds(workflow_id):
            return await self.residency.restore(workflow_id)
        return self.runs.get(workflow_id)

    def driven_here(self, workflow_id: str) -> bool:
        """True when this engine drives the run, in memory or evicted."""
        return workflow_id in self.runs or self.residency.holds(workflow_id)

    # --- driving runs -----------------------------------------------------------------

    def launch(self, run: Run) -> None:
        if self.state != "open" or not self.drives:
            return  # shutting down, or a client: it stays stored for an engine to drive
        self.runs[run.id] = run
        run.task = asyncio.get_running_loop().create_task(
            self._drive(run), name=f"pyweft-run:{run.id}"
        )

    async def _drive(self, run: Run) -> None:
        try:
            await run.drive(WorkflowContext)
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # a bug: keep the run resumable
            if not run.stopping:
                log.exception("workflow %s stopped without finishing: %s", run.id, exc)
        finally:
            if self.runs.get(run.id) is run:
                del self.runs[run.id]
            if (
                run.transiently_stopped
                and self.state == "open"
                and run.state.status not in TERMINAL_STATUSES
            ):
                # Before done is settled, so result() waiters see it is being re-driven.
                self.redriver.stranded(
                    run.id,
                    run.teardown_cause,
                    carried=run.unsaved,
                    quiet=not isinstance(run.teardown_cause, StorageError),
                )
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

    async def probe_store(self) -> None:
        """Raise unless the store takes a write now (a no-op rewrite of the schema key)."""
        raw = await self.storage.get(keys.SCHEMA_KEY)
        if raw is not None:
            await self.committer.commit(
                [Put(key=keys.SCHEMA_KEY, value=raw)], [Expect(key=keys.SCHEMA_KEY, value=raw)]
            )

    async def resume_run(self, workflow_id: str) -> bool:
        """Load a stored ``running`` run and drive it here. False if it cannot be.

        Under ``workflow-lease`` the run's claim is taken first; a run another
        engine holds is left to it.
        """
        services = self.services_or_raise()
        if workflow_id in self.runs or self.residency.holds(workflow_id):
            return False  # driven here already (evicted runs come back through residency)
        claims = self.claims
        if (
            claims is not None
            and workflow_id not in claims.claims
            and not await claims.acquire(workflow_id)
        ):
            return False
        loaded = await quarantine.load(self, workflow_id)  # None if quarantined
        if loaded is None or loaded.state.status != "running" or workflow_id in self.runs:
            if claims is not None and workflow_id not in self.runs:
                await claims.release_all_of([workflow_id])
            return False
        definition = self.workflows.get(loaded.state.type)
        if definition is None:
            log.warning(
                "run %s has workflow type %r, which is not registered; leaving it for "
                "an engine that has it",
                workflow_id,
                loaded.state.type,
            )
            return False
        if loaded.state.version != definition.version:
            await self._version_mismatch(loaded.state, definition)
            return False
        run = Run(
            services,
            definition,
            loaded.state,
            loaded.state_raw,
            loaded.journal,
            loaded.pendings,
            loaded.applied,
            loaded.version_pins,
            loaded.attributes,
            carried={
                step: rec
                for step, rec in self.redriver.take_carried(workflow_id).items()
                if step not in loaded.journal  # stored after all: the journal has it
            },
        )
        self.launch(run)
        return True

    async def _version_mismatch(self, state: WorkflowState, definition: WorkflowDefinition) -> None:
        error = VersionMismatchError(
            f"run {state.id!r} was started by version {state.version!r} of workflow "
            f"{state.type!r}, but version {definition.version!r} is registered; keep the old "
            "version deployed until its runs finish, or patch in place with ctx.get_version",
            workflow_id=state.id,
            stored_version=state.version,
            registered_version=definition.version,
        )
        if self.version_mismatch == "raise":
            raise error
        log.error("%s", error)
        new, _ = await lifecycle.transition(
            self.storage,
            self.committer,
            state.id,
            frozenset({"running"}),
            self.clock.now(),
            status="failed",
            error=ErrorInfo(type="VersionMismatchError", message=str(error), code=error.code),
        )
        if new is not None:
            self.emit("failed", new)

    # --- pending (delayed) runs ---------------------------------------------------------

    def arm_pending(self, state: WorkflowState) -> None:
        """Start a ``pending`` run when its start time comes."""
        old = self.pending_timers.pop(state.id, None)
        if old is not None:
            old.cancel()

        def due() -> None:
            self.pending_timers.pop(state.id, None)
            if self.state == "open":
                asyncio.get_running_loop().create_task(self._begin_pending(state.id))

        self.pending_timers[state.id] = self.clock.call_at(state.start_at or 0.0, due)

    async def _begin_pending(self, workflow_id: str) -> None:
        try:
            plan = await self.claims.acquire_ops(workflow_id) if self.claims else None
            if self.claims is not None and plan is None:
                return  # another engine holds it and starts it
            new, _ = await lifecycle.transition(
                self.storage,
                self.committer,
                workflow_id,
                frozenset({"pending"}),
                self.clock.now(),
                extra_ops=plan[0] if plan else None,
                extra_conds=plan[1] if plan else None,
                status="running",
                start_at=None,
            )
            if new is not None and plan is not None and self.claims is not None:
                self.claims.adopt(plan[2])
            if new is not None and workflow_id not in self.runs:
                await self.resume_run(workflow_id)
        except Exception:
            log.exception("could not start pending run %s", workflow_id)

    def disarm_pending(self, workflow_id: str) -> None:
        timer = self.pending_timers.pop(workflow_id, None)
        if timer is not None:
            timer.cancel()

    # --- child workflows (the ChildHost protocol of runs) -------------------------------

    def child_definition(self, wf: Callable[..., Any] | str) -> WorkflowDefinition:
        return self.definition(wf)

    async def child_create(
        self,
        parent: Run,
        definition: WorkflowDefinition,
        args: tuple[Any, ...],
        child_id: str,
        policy: str,
    ) -> tuple[list[Op], list[Expect], Callable[[], None]]:
        payload = encode_args(self.codec, args)
        if len(payload) > self.max_payload_bytes:
            raise payload_size_error(
                len(payload), self.max_payload_bytes, what=f"arguments of child {child_id!r}"
            )
        now = self.clock.now()
        state = WorkflowState(
            id=child_id,
            type=definition.name,
            version=definition.version,
            status="running",
            args=payload,
            created_at=now,
            updated_at=now,
            parent_id=parent.id,
            parent_close_policy=policy,
            depth=parent.state.depth + 1,
        )
        raw = records.encode(state)
        ops, conds = create_ops(state, raw)
        plan = await self.claims.acquire_ops(child_id) if self.claims else None
        if plan is not None:
            ops += plan[0]
            conds += plan[1]

        def launch() -> None:
            if plan is not None and self.claims is not None:
                self.claims.adopt(plan[2])
            self.emit("started", state)
            if self.state == "open" and self.services is not None:
                self.launch(Run(self.services, definition, state, raw, {}, {}))

        return ops, conds, launch

    async def wait_terminal(self, workflow_id: str) -> WorkflowState:
        """The run's terminal state, waiting for it (locally driven or not)."""
        delay = 0.01
        while True:
            await self.settled(workflow_id)
            await self.redriver.wait(workflow_id)
            run = self.runs.get(workflow_id)
            if run is not None:
                try:
                    return await asyncio.shield(run.done)
                except EngineClosedError:
                    continue
            state = await self.visibility.state(workflow_id)
            if state.status in TERMINAL_STATUSES:
                return state
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.poll_interval)

    async def cancel_child(self, workflow_id: str) -> None:
        from pyweft.engine import control

        try:
            await control.cancel(self, workflow_id)
        except Exception:
            log.exception("could not cancel child %s", workflow_id)

    def claim_lost(self, workflow_id: str) -> None:
        """Another engine took this run over: stop driving it, write nothing more."""
        self.redriver.forget(workflow_id)
        run = self.runs.get(workflow_id)
        if run is not None:
            run.tear_down("another engine took over its claim")

    async def reclaim(self) -> int:
        """Take over running runs whose owner stopped renewing, and drive them here.

        Batched, so that thousands of runs of a dead engine move within one scan: the
        holders are read with one scan, the candidates' state records and epochs with
        concurrent reads (grouped by the store), the claims taken with concurrent
        conditional batches (one statement per group on PostgreSQL); the runs taken are
        then held like evicted runs (see residency): replayed in the background, and at
        once when a message or query concerns them. Runs this engine cannot drive
        (type not registered, another version) are never claimed. A claim this engine
        holds for a run nobody drives here (left over by a failure) is driven again
        once it has looked orphaned for two scans in a row.
        """
        from pyweft.engine.ownership.claims import decode_holder, epoch_key, holder_key
        from pyweft.engine.recovery import ids_with_status

        claims = self.claims
        if claims is None or self.state != "open" or not self.drives:
            return 0
        holders = dict(await self.storage.scan("own:h:"))
        orphans: set[str] = set()
        wanted: list[str] = []
        for workflow_id in await ids_with_status(self.storage, "running"):
            if self._busy_here(workflow_id):
                continue
            if workflow_id in claims.claims:
                orphans.add(workflow_id)
                continue
            raw = holders.get(holder_key(workflow_id))
            holder = decode_holder(raw) if raw is not None else None
            if (
                holder is not None
                and holder.engine_id != claims.engine_id
                and not claims.stale(holder)
            ):
                continue
            wanted.append(workflow_id)
        resume = sorted(orphans & self._orphans_seen)
        self._orphans_seen = orphans - set(resume)
        if wanted and self.state == "open":
            states, epochs = await asyncio.gather(
                asyncio.gather(*(self.storage.get(keys.wf(i)) for i in wanted)),
                asyncio.gather(*(self.storage.get(epoch_key(i)) for i in wanted)),
            )
            found = [
                (workflow_id, holders.get(holder_key(workflow_id)), epoch)
                for workflow_id, raw, epoch in zip(wanted, states, epochs, strict=True)
                if raw is not None and self._drivable(raw)
            ]
            taken = await claims.acquire_many(found) if self.state == "open" else []
            # Held like evicted runs: replayed in the background, and at once by whatever
            # concerns them, so a big takeover answers messages before it is replayed.
            self.residency.adopt(taken)
        else:
            taken = []
        for workflow_id in resume:
            if self.state != "open" or self._busy_here(workflow_id):
                continue
            try:
                await self.resume_run(workflow_id)
            except Exception:
                log.exception("could not drive workflow %s again", workflow_id)
        return len(taken)

    def _busy_here(self, workflow_id: str) -> bool:
        return (
            self.driven_here(workflow_id)
            or workflow_id in self.loading
            or self.redriver.is_stranded(workflow_id)
        )

    def _drivable(self, state_raw: bytes) -> bool:
        """Can this engine drive a run with this state record (status, type, version)?"""
        try:
            state = records.decode_state(state_raw)
        except Exception:
            return True  # resume_run quarantines it
        definition = self.workflows.get(state.type)
        return (
            state.status == "running"
            and definition is not None
            and definition.version == state.version
        )

    async def close_children(self, parent: Run) -> None:
        """Ask still-running children with the await/request_cancel policy to cancel."""
        from pyweft.engine import control

        rows = await self.storage.scan(f"ix:p:{keys.enc(parent.id)}:")
        for key, _ in rows:
            child_id = keys.id_from_index_key(key)
            raw = await self.storage.get(keys.wf(child_id))
            if raw is None:
                continue
            child = records.decode_state(raw)
            if child.status in TERMINAL_STATUSES or child.parent_close_policy == "abandon":
                continue
            try:
                await control.cancel(self, child_id)
            except Exception:
                log.exception("could not cancel child %s of %s", child_id, parent.id)


def create_ops(state: WorkflowState, raw: bytes) -> tuple[list[Op], list[Expect]]:
    """The writes that create a run, and the condition that it does not exist yet."""
    ops: list[Op] = [Put(key=keys.wf(state.id), value=raw)]
    index = keys.index_keys(state.id, state.type, state.status, state.created_at)
    index += keys.extra_index_keys(state.id, state.created_at, state.parent_id, state.tags)
    index.append(keys.updated_index(state.id, state.updated_at))
    ops += [Put(key=k, value=b"") for k in index]
    return ops, [Expect(key=keys.wf(state.id), value=None)]
