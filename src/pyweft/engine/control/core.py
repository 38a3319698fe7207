"""The engine's shared internals: registry, live runs, launching and resuming runs.

``Engine`` (the public facade) and the feature modules (creation, control,
children, maintenance) all work through one ``EngineCore``, so that state such
as "which runs does this process drive" lives in exactly one place.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pyweft.clock import Clock, TimerHandle
from pyweft.codec import PayloadCodec, encode_args, payload_size_error
from pyweft.definitions import ActivityDefinition, WorkflowDefinition, workflow_definition_of
from pyweft.engine.composition import children
from pyweft.engine.composition.children import ClosePlan
from pyweft.engine.context import WorkflowContext
from pyweft.engine.control import lifecycle
from pyweft.engine.ownership.claims import ClaimRegistry
from pyweft.engine.replay import keys, quarantine, records
from pyweft.engine.replay.commit import Committer
from pyweft.engine.replay.drift import CodeDrift, DriftCall
from pyweft.engine.replay.events import EventBus, WorkflowEvent
from pyweft.engine.replay.info import to_datetime
from pyweft.engine.replay.records import TERMINAL_STATUSES, WorkflowState
from pyweft.engine.replay.redrive import Redriver
from pyweft.engine.replay.residency import Residency
from pyweft.engine.replay.run import Run
from pyweft.engine.replay.services import RunServices
from pyweft.engine.visibility.reader import Visibility
from pyweft.errors import (
    EngineClosedError,
    EngineDeposedError,
    LeaseNotHeldError,
    StorageError,
    VersionMismatchError,
    WorkflowNotRegisteredError,
)
from pyweft.observability import chain
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
        version_mismatch: Literal["block", "fail_run", "raise"],
        on_nondeterminism: Literal["block", "fail_run"] = "block",
    ) -> None:
        self.storage = storage
        self.clock = clock
        self.codec = codec
        self.max_payload_bytes = max_payload_bytes
        self.poll_interval = poll_interval
        self.version_mismatch = version_mismatch
        self.on_nondeterminism = on_nondeterminism
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
        self.adopting: set[str] = set()  # runs resume_run is adopting right now
        self.blocked_here: set[str] = set()  # blocked runs this code was seen drifting on
        self.left_alone: set[str] = set()  # runs logged as not drivable here
        self.other_versions: set[tuple[str, str]] = set()  # (index key, our version)
        # control.cancel, handed over by Engine at open (the core does not import control).
        self.cancel_run: Callable[[str], Awaitable[None]] = _no_cancel
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
            if run.drift is not None:
                await self.block(run)
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

    async def resume_run(
        self, workflow_id: str, *, force: bool = False, recovering: bool = False
    ) -> bool:
        """Load a stored run and drive it here. False if it cannot be, or already is.

        Every path that adopts a run comes through here (recovery, the reclaim scan,
        wake-ups, restores of evicted runs, ``resume``, re-drives after a storage
        failure), and only one adoption per run is under way at a time: a second path
        that arrives meanwhile leaves the run to the first, so an engine never drives
        a run twice at once. A run is adopted only when its workflow type and version
        are registered here, checked before anything is written: under
        ``workflow-lease`` its claim is taken after that (a run another engine holds
        is left to it), so an engine never holds a run it cannot replay. A
        ``blocked`` run is set running again and driven when this engine has not
        already found it drifting (or with ``force``, for ``resume``).
        ``recovering``: called by recovery, where ``version_mismatch="raise"`` raises.
        """
        services = self.services_or_raise()
        if not self.drives or workflow_id in self.adopting or self.driven_here(workflow_id):
            return False
        self.adopting.add(workflow_id)
        try:
            return await self._adopt(services, workflow_id, force=force, recovering=recovering)
        finally:
            self.adopting.discard(workflow_id)

    async def _adopt(
        self, services: RunServices, workflow_id: str, *, force: bool, recovering: bool
    ) -> bool:
        claims = self.claims
        loaded = None
        if claims is None or workflow_id in claims.claims:
            # Ours already (an evicted run, or one engine drives them all): one read
            # serves the checks below and the replay.
            loaded = await quarantine.load(self, workflow_id)  # None if gone or quarantined
            state = loaded.state if loaded is not None else None
        else:
            state = await quarantine.state(self, workflow_id)  # None if gone or quarantined
        if state is None or state.status not in ("running", "blocked"):
            return False
        definition = self.workflows.get(state.type)
        if definition is None:
            self._leave_alone(
                state, f"its workflow type {state.type!r} is not registered in this engine"
            )
            return False
        if state.version != definition.version:
            if state.status == "running":
                await self._version_mismatch(state, definition, recovering=recovering)
            return False
        if state.status == "blocked":
            if (not force and workflow_id in self.blocked_here) or not await self._unblock(
                workflow_id
            ):
                return False
            loaded = None  # unblocking rewrote its state: read it again
        elif (
            claims is not None
            and workflow_id not in claims.claims
            and not await claims.acquire(workflow_id)
        ):
            return False
        if loaded is None:
            loaded = await quarantine.load(self, workflow_id)  # None if quarantined
        if loaded is None or loaded.state.status != "running" or workflow_id in self.runs:
            if claims is not None and workflow_id not in self.runs:
                await claims.release_all_of([workflow_id])
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
        for name, buffered in loaded.signals.items():
            run.signal_cache[name] = buffered[::-1]  # the oldest last: taken first
        self.blocked_here.discard(workflow_id)
        self.launch(run)
        return True

    def _leave_alone(self, state: WorkflowState, why: str) -> None:
        """Log (once per run) that a run is left for an engine that can replay it."""
        if state.id not in self.left_alone:
            self.left_alone.add(state.id)
            log.warning(
                "run %s (%s) is left for an engine that can replay it: %s",
                state.id,
                state.status,
                why,
            )

    async def _held_elsewhere(self, workflow_id: str) -> bool:
        """Under ``workflow-lease``: does another engine hold a live claim on the run?"""
        from pyweft.engine.ownership.claims import decode_holder, holder_key

        claims = self.claims
        if claims is None:
            return False  # one engine drives the whole store: this one
        raw = await self.storage.get(holder_key(workflow_id))
        holder = decode_holder(raw) if raw is not None else None
        return (
            holder is not None and holder.engine_id != claims.engine_id and not claims.stale(holder)
        )

    async def _version_mismatch(
        self, state: WorkflowState, definition: WorkflowDefinition, *, recovering: bool = False
    ) -> None:
        """A running run of another version of a registered type: never driven here.

        If no other engine drives it, it is blocked (the default), failed
        (``"fail_run"``), or, for ``"raise"`` during recovery, the engine refuses to open.
        """
        error = VersionMismatchError(
            f"run {state.id!r} was started by version {state.version!r} of workflow "
            f"{state.type!r}, but version {definition.version!r} is registered here; it waits "
            f"(blocked) for an engine that registers version {state.version!r}. Keep the old "
            "version deployed until its runs finish, or patch in place with ctx.get_version",
            workflow_id=state.id,
            stored_version=state.version,
            registered_version=definition.version,
            drift=CodeDrift(
                reason="workflow_version",
                step=None,
                recorded=DriftCall(
                    kind="workflow", name=state.type, detail=f"version {state.version}"
                ),
                requested=DriftCall(
                    kind="workflow",
                    name=definition.name,
                    detail=f"version {definition.version} registered here",
                ),
            ),
        )
        if await self._held_elsewhere(state.id):
            return  # an engine that has its version drives it
        if self.version_mismatch == "raise":
            if recovering:
                raise error
            self._leave_alone(state, str(error))
            return
        status = "failed" if self.version_mismatch == "fail_run" else "blocked"
        new, _ = await lifecycle.transition(
            self.storage,
            self.committer,
            state.id,
            frozenset({"running"}),
            self.clock.now(),
            rotate_claim=self.claims is not None,  # fences out an owner presumed dead
            status=status,
            error=records.error_info(error),
        )
        if new is None:
            return
        log.error("workflow %s %s: %s", state.id, status, error)
        self.emit(
            status,
            new,
            reason=str(error),
            error_type="VersionMismatchError",
            stored_version=state.version,
            registered_version=definition.version,
        )

    async def _unblock(self, workflow_id: str) -> bool:
        """Set a blocked run running again (taking its claim in the same batch)."""
        claims = self.claims
        plan = await claims.acquire_ops(workflow_id) if claims is not None else None
        if claims is not None and plan is None:
            return False
        new, _ = await lifecycle.transition(
            self.storage,
            self.committer,
            workflow_id,
            frozenset({"blocked"}),
            self.clock.now(),
            extra_ops=plan[0] if plan else None,
            extra_conds=plan[1] if plan else None,
            status="running",
            error=None,
        )
        if new is None:
            return False
        if plan is not None and claims is not None:
            claims.adopt(plan[2])
        log.info("workflow %s unblocked: this engine replays it", workflow_id)
        self.emit("resumed", new, unblocked=True)
        return True

    async def block(self, run: Run) -> None:
        """Store a run whose code drifted (see ``Run.code_drift``) as ``blocked``."""
        drift = run.drift
        try:
            new = await run.block()
        except StorageError as exc:
            # Still running in the store: re-driven when the store works, it drifts
            # again and is blocked then.
            self.redriver.stranded(run.id, exc)
            return
        except (EngineDeposedError, LeaseNotHeldError):
            return  # another engine drives the run now: it will find the drift itself
        if new is None:
            return  # changed meanwhile by another writer (cancelled, suspended...)
        self.blocked_here.add(run.id)
        log.error("workflow %s blocked: %s", run.id, drift)
        self.emit(
            "blocked",
            new,
            reason=str(drift),
            error_type=type(drift).__name__,
            step=getattr(drift, "step", None),
        )

    async def adopt_blocked(self) -> int:
        """Take the blocked runs this engine's code may replay: their type and version
        are registered here and this engine has not found them drifting already.
        Returns how many were set running again."""
        taken = 0
        for name, definition in list(self.workflows.items()):
            prefix = keys.list_prefix("blocked", name)
            for key, _ in await self.storage.scan(prefix):
                workflow_id = keys.id_from_index_key(key)
                if (
                    self.state != "open"
                    or workflow_id in self.blocked_here
                    or (key, definition.version) in self.other_versions
                ):
                    continue
                if await self.resume_run(workflow_id):
                    taken += 1
                elif workflow_id not in self.blocked_here and not self.driven_here(workflow_id):
                    # Its version differs (a run's version never changes): skip it from now on.
                    state = await quarantine.state(self, workflow_id)
                    if state is not None and state.version != definition.version:
                        self.other_versions.add((key, definition.version))
        return taken

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
            for _ in range(5):
                # engine.debounce moves a pending run's start later (never earlier): a
                # timer armed for the old time re-arms instead of starting it early, and
                # the start is conditioned on the record it judged.
                raw = await self.storage.get(keys.wf(workflow_id))
                if raw is None:
                    return
                stored = records.decode_state(raw)
                if stored.status != "pending":
                    return
                if (stored.start_at or 0.0) > self.clock.now():
                    self.arm_pending(stored)
                    return
                plan = await self.claims.acquire_ops(workflow_id) if self.claims else None
                if self.claims is not None and plan is None:
                    return  # another engine holds it and starts it
                new, current = await lifecycle.transition(
                    self.storage,
                    self.committer,
                    workflow_id,
                    frozenset({"pending"}),
                    self.clock.now(),
                    extra_ops=plan[0] if plan else None,
                    extra_conds=[
                        *(plan[1] if plan else ()),
                        Expect(key=keys.wf(workflow_id), value=raw),
                    ],
                    status="running",
                    start_at=None,
                )
                if new is not None or current.status != "pending":
                    break
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

    async def close_plan(self, parent_id: str, now: float) -> ClosePlan:
        return await children.close_plan(self.storage, parent_id, now)

    def child_definition(self, wf: Callable[..., Any] | str) -> WorkflowDefinition:
        return self.definition(wf)

    async def child_create(
        self,
        parent: Run,
        definition: WorkflowDefinition,
        args: tuple[Any, ...],
        child_id: str,
        policy: str,
        deadline: float | None = None,
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
            deadline=deadline,
            headers=await chain.child_headers(parent, definition.name, args, child_id),
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
        """The run's terminal state, waiting for it (locally driven or not).

        A running child that nobody drives here is taken up once (when this engine may
        drive it): a child created by a commit whose reply was lost was never launched,
        and its parent, re-driven from the journal, would otherwise wait for ever.
        """
        delay = 0.01
        adopted = False
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
            if not adopted and state.status == "running" and self.drives:
                adopted = True
                if await self.resume_run(workflow_id):
                    continue
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.poll_interval)

    async def cancel_child(self, workflow_id: str) -> None:
        try:
            await self.cancel_run(workflow_id)
        except Exception:
            log.exception("could not cancel child %s", workflow_id)

    def claim_lost(self, workflow_id: str) -> None:
        """Another engine took this run over: stop driving it, write nothing more."""
        self.redriver.forget(workflow_id)
        run = self.runs.get(workflow_id)
        if run is not None:
            run.tear_down("another engine took over its claim")

    async def reclaim(self, undrivable: list[str] | None = None) -> int:
        """Take over running runs whose owner stopped renewing, and drive them here.

        Batched, so that thousands of runs of a dead engine move within one scan: the
        holders are read with one scan, the candidates' state records and epochs with
        concurrent reads (grouped by the store), the claims taken with concurrent
        conditional batches (one statement per group on PostgreSQL); the runs taken are
        then held like evicted runs (see residency): replayed in the background, and at
        once when a message or query concerns them. Runs this engine cannot drive
        (type not registered, another version) are never claimed. A claim this engine
        holds for a run nobody drives here (left over by a failure) is driven again
        once it has looked orphaned for two scans in a row. ``undrivable`` collects the
        unclaimed runs left alone for their type or version (recovery deals with those).
        """
        from pyweft.engine.ownership.claims import decode_holder, epoch_key, holder_key
        from pyweft.engine.replay.recovery import ids_with_status

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
            found = []
            for workflow_id, raw, epoch in zip(wanted, states, epochs, strict=True):
                if raw is not None and self._drivable(raw):
                    found.append((workflow_id, holders.get(holder_key(workflow_id)), epoch))
                elif raw is not None and undrivable is not None:
                    undrivable.append(workflow_id)
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
            or workflow_id in self.adopting  # resume_run is taking it up right now
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

    async def close_children(self, parent_id: str, asked: list[str] | None = None) -> None:
        """Deliver the cancel requests a parent's terminal commit wrote to its children
        (``asked``; by default every running child asked to cancel) to those driven
        here, now. The stored requests and wake-up markers are what makes them durable:
        children driven elsewhere, or by nobody yet, get them from those."""
        from pyweft.engine.messages.wakeups import wake

        if asked is None:
            asked = []
            for key, _ in await self.storage.scan(f"ix:p:{keys.enc(parent_id)}:"):
                asked.append(keys.id_from_index_key(key))
        for child_id in asked:
            try:
                if self.residency.holds(child_id):
                    self.residency.wake(child_id)  # evicted: its replay reads the request
                elif (child := self.runs.get(child_id)) is not None:
                    await wake(self, child)
            except Exception:
                log.exception("could not wake child %s of %s", child_id, parent_id)


async def _no_cancel(workflow_id: str) -> None:
    raise RuntimeError(f"cannot cancel {workflow_id!r}: the engine is not open")


def create_ops(state: WorkflowState, raw: bytes) -> tuple[list[Op], list[Expect]]:
    """The writes that create a run, and the condition that it does not exist yet."""
    ops: list[Op] = [Put(key=keys.wf(state.id), value=raw)]
    index = keys.index_keys(state.id, state.type, state.status, state.created_at)
    index += keys.extra_index_keys(
        state.id, state.created_at, state.parent_id, state.tags, state.schedule_id
    )
    index.append(keys.updated_index(state.id, state.updated_at))
    ops += [Put(key=k, value=b"") for k in index]
    return ops, [Expect(key=keys.wf(state.id), value=None)]
