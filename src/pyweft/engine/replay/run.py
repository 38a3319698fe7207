"""Drives one workflow run: step numbering, replay from the journal, commits, waits.

Recovery re-runs the workflow function from the top. Each durable operation
takes the next step number when it is *called*; if the journal holds that
step, its recorded outcome is returned at once (replay), otherwise the step
runs live and its outcome is committed before the workflow sees it.

The step kinds themselves live in their own modules (``activities``,
``timers``, ``signals``, ``updates``, ``conditions``, ``reviews``); this
module is the machinery they share. ``Run`` inherits the rest of a run from
mixins: recording its steps (``step_commits``), driving it to its end
(``driving``) and stopping it (``teardown``); what it needs from its engine is
``RunServices`` (``services``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import msgspec

from pyweft.codec import payload_size_error
from pyweft.definitions import WorkflowDefinition
from pyweft.engine.replay import keys, operations, records
from pyweft.engine.replay.drift import (
    CodeDrift,
    DriftCall,
    DriftReason,
    open_call,
    recorded_call,
    requested_call,
)
from pyweft.engine.replay.driving import Driving, status_change_ops
from pyweft.engine.replay.events import EventKind, WorkflowEvent

# Re-exported: the branch markers and RunEnding lived here before handler_runs shared them.
from pyweft.engine.replay.flow import RACE_BRANCH as RACE_BRANCH
from pyweft.engine.replay.flow import RACE_PENDINGS as RACE_PENDINGS
from pyweft.engine.replay.flow import Deferred as Deferred
from pyweft.engine.replay.flow import RunEnding as RunEnding
from pyweft.engine.replay.flow import Superseded as Superseded
from pyweft.engine.replay.handler_runs import CURRENT_HANDLER, Invocations
from pyweft.engine.replay.info import to_datetime
from pyweft.engine.replay.records import (
    AppliedUpdate,
    PendingStep,
    StepRecord,
    WorkflowState,
)
from pyweft.engine.replay.services import RunServices
from pyweft.engine.replay.step_commits import StepCommits
from pyweft.engine.replay.teardown import Teardown
from pyweft.errors import (
    HistoryLimitError,
    NonDeterminismError,
    PyweftError,
    RunTornDown,
)
from pyweft.observability import chain
from pyweft.storage.base import Expect, Op, Put

if TYPE_CHECKING:
    from pyweft.engine.composition.saga import CompensationShield
    from pyweft.engine.messages.updates import UpdateHandler

T = TypeVar("T")
log = logging.getLogger("pyweft.run")


class Run(StepCommits, Driving, Teardown):
    """The in-memory driver of one run. Created by the engine, one per live run."""

    # Wake-up bookkeeping for changed()/notify(); class-level defaults, set per run on use.
    wake_seq: int = 0
    """Bumped by every notify(). A wait reads it before it looks, and changed(since=...)
    returns at once if it moved, so news between the look and the park is not missed."""
    _parked: dict[asyncio.Future[None], float | None] | None = None
    # Set while a saga compensates: cancels and the execution timeout wait for its grace.
    shield: CompensationShield | None = None

    def __init__(
        self,
        services: RunServices,
        definition: WorkflowDefinition,
        state: WorkflowState,
        state_raw: bytes,
        journal: dict[int, StepRecord],
        pendings: dict[int, PendingStep],
        applied: list[AppliedUpdate] | None = None,
        version_pins: dict[str, int] | None = None,
        attributes: dict[str, Any] | None = None,
        carried: dict[int, StepRecord] | None = None,
    ) -> None:
        self.services = services
        self.definition = definition
        # Async update handler invocations; their steps leave the workflow's journal here.
        self.handlers = Invocations(journal, pendings)
        self.state = state
        self.state_raw = state_raw
        self.id = state.id
        self.journal = journal
        self.pendings = pendings
        self.cancel_requested = state.cancel_requested
        # A cancel is raised into the workflow once; cleanup steps after it run normally.
        self.cancel_delivered = False
        self.terminating: str | None = None  # "timed_out": no more steps may run
        # No new step may start (shutdown, suspend): the next ctx call tears the run down.
        self.stopping = False
        self._stop_reason = "the engine stopped driving it"
        # Set once the engine stopped driving this run for a reason of its own: every
        # ctx call raises RunTornDown and nothing more is recorded (see tear_down).
        self.torn_down: RunTornDown | None = None
        self.teardown_cause: BaseException | None = None
        self.fatal: PyweftError | None = None  # fails the run even if the workflow catches it
        # Set when the code stopped replaying the journal and the run is to be blocked
        # (see code_drift); the engine stores it as ``blocked`` once the task ends.
        self.drift: PyweftError | None = None
        self.task: asyncio.Task[None] | None = None
        self.done: asyncio.Future[WorkflowState] = asyncio.get_running_loop().create_future()
        self.query_handlers: dict[str, Callable[..., Any]] = {}
        self.update_handlers: dict[str, UpdateHandler] = {}
        self.update_waits: dict[str, int] = {}  # names ctx.wait_for_update is waiting on
        self.updates_dirty = True  # there may be update requests we have not looked at
        self.signal_cache: dict[str, list[tuple[str, bytes]]] = {}
        self.signal_synced: set[str] = set()
        self.signal_arrivals: dict[str, int] = {}
        self.signal_seen: dict[str, str] = {}  # per name, the newest signal key cached yet
        # ctx.on_signal handlers (messages/handlers.py), the names ctx.wait_for_signal is
        # waiting on, and whether buffered signals may wait for a handler.
        self.signal_handlers: dict[str, Any] = {}
        self.signal_waits: dict[str, int] = {}
        self.signals_dirty = False
        self._next_step = 0
        self._live_ops = 0
        self.child_waits = 0  # live operations waiting for a child run or race branches
        self.timer_waits = 0  # wait_until futures not resolved yet (retry backoff...)
        self._open_pendings: set[int] = set(pendings)
        for handler_pendings in self.handlers.pendings.values():
            self._open_pendings.update(handler_pendings)
        self._lock = asyncio.Lock()
        self.update_lock = asyncio.Lock()
        self._journal_prefix = keys.journal_prefix(state.id)
        self._changed: list[asyncio.Future[None]] = []
        self._timeout_handle: Any = None
        # Writes that must land with the run's next commit (attributes, version pins).
        self.staged: dict[str, Op] = {}
        # Step records written with the run's next commit (see step_commits.defer_step),
        # and the deletes of the worker outcomes that activity steps took (by step).
        self.deferred: Deferred = []
        self.task_outcomes: dict[int, Op] = {}
        self.version_pins: dict[str, int] = dict(version_pins or {})
        self.has_children = False
        # Answers given with respond() and still being written: the run ends only after
        # them, so a crash can never leave a finished run without an answer it gave.
        self.answering: set[asyncio.Task[None]] = set()
        # Updates taken with wait_for_update and not answered yet (id -> name).
        self.unanswered: dict[str, str] = {}
        self.attributes: dict[str, Any] = dict(attributes or {})
        # ctx.now(): the time the latest step the workflow saw was recorded; replay-stable.
        self.logical_now = state.generation_started_at or state.created_at
        self._rng: random.Random | None = None  # seeded on first use: most runs never ask
        # Activity outcomes whose commit failed for a transient reason (in this run's
        # earlier life in this engine): committed at their step instead of running the
        # activity again. ``unsaved`` collects them; ``carried`` hands them to replay.
        self.unsaved: dict[int, StepRecord] = {}
        self.carried: dict[int, StepRecord] = dict(carried or {})
        self.recorded_updates: dict[int, list[AppliedUpdate]] = {}
        self.update_index: dict[int, int] = {}
        for u in sorted(applied or (), key=lambda u: (u.boundary, u.index)):
            self.recorded_updates.setdefault(u.boundary, []).append(u)
            self.update_index[u.boundary] = u.index + 1

    @property
    def rng(self) -> random.Random:
        """The run's replay-stable random source, seeded by its id and generation."""
        if self._rng is None:
            seed = hashlib.sha256(f"{self.id}\x00{self.state.generation}".encode()).digest()
            self._rng = random.Random(int.from_bytes(seed[:8], "big"))
        return self._rng

    # --- step allocation and replay -------------------------------------------------

    @property
    def steps_taken(self) -> int:
        """How many step numbers the workflow has taken so far (replayed or live)."""
        return self._next_step

    def alloc_step(self) -> int:
        """The next step number: only the workflow's own task may take one."""
        task = asyncio.current_task()
        if self.task is not None and task is not self.task:
            raise operations.not_in_workflow_task(task.get_name() if task else "(no task)")
        self.check_alive()
        self._next_step += 1
        limit = self.definition.max_history_steps or self.services.max_history_steps
        if self._next_step > limit:
            self.fatal = HistoryLimitError(
                f"workflow {self.id!r} took more than {limit} steps in one run; a loop that "
                "never ends would grow its history without bound. Use ctx.continue_as_new "
                "to start a long-lived loop afresh, or raise max_history_steps.",
                workflow_id=self.id,
                limit=limit,
            )
        if isinstance(self.fatal, HistoryLimitError):
            raise RunEnding(self.fatal)
        if self._next_step == limit * 4 // 5 and not self.replaying:
            self.warn(f"the run has taken {self._next_step} of its {limit} steps")
        return self._next_step

    @property
    def steps_allocated(self) -> int:
        return self._next_step

    @property
    def replaying(self) -> bool:
        """True while the journal still holds steps the code has not reached again."""
        return bool(self.journal)

    def replay(
        self, step: int, kind: str, name: str, args: Sequence[Any] | None = None
    ) -> StepRecord | None:
        """The recorded outcome of ``step``, after re-applying updates recorded before it.
        ``args`` (the call's arguments, where it has any) only describe a drift."""
        if self.recorded_updates:
            self._reapply_updates(step)
        if self.fatal is not None:
            raise RunEnding(self.fatal)
        rec = self.journal.pop(step, None)
        if rec is None:
            return None
        if rec.kind != kind or rec.name != name:
            self.nondeterminism(step, recorded_call(rec), requested_call(kind, name, args))
        if rec.finished_at > self.logical_now:
            self.logical_now = rec.finished_at
        return rec

    def _reapply_updates(self, step: int) -> None:
        hooks = self.services.updates
        for boundary in sorted(b for b in self.recorded_updates if b <= step):
            for applied in self.recorded_updates.pop(boundary):
                if hooks is not None:
                    hooks.reapply(self, applied)

    def nondeterminism(
        self,
        step: int,
        recorded: DriftCall,
        requested: DriftCall,
        reason: DriftReason = "step_mismatch",
    ) -> NoReturn:
        self.code_drift(
            NonDeterminismError(
                f"workflow {self.id!r} is not deterministic at step {step}: the journal "
                f"recorded {recorded.phrase()} but the code now asks for {requested.phrase()}. "
                "Code changes that reorder, add or remove durable steps must not be deployed "
                "under running workflows; keep the old order or version the workflow.",
                workflow_id=self.id,
                step=step,
                drift=CodeDrift(reason=reason, step=step, recorded=recorded, requested=requested),
            )
        )

    def code_drift(self, error: PyweftError) -> NoReturn:
        """The code no longer replays this run's journal; ``error`` says where and how.

        By default (``on_nondeterminism="block"``) the run is torn down at once, so a
        workflow that catches the error (``except Exception``) records nothing more,
        and the engine then stores it as ``blocked``, journal intact, until code that
        replays it drives it again. With ``"fail_run"`` the run ends ``failed`` with
        ``error`` whatever the workflow catches, as for the history limit.
        """
        if self.services.on_nondeterminism == "fail_run":
            self.fatal = error
            raise RunEnding(error)
        if self.drift is None and self.torn_down is None:
            self.drift = error
        raise self.tear_down(
            f"blocked: its code no longer replays its journal ({type(error).__name__})", error
        )

    async def block(self) -> WorkflowState | None:
        """Store the run as ``blocked`` by its drift: journal and open steps are kept, the
        error says why, and the claim (``workflow-lease``) is given up so that an engine
        whose code replays the run can take it. ``None`` if another writer changed the
        run first (a cancel, a suspend): the run is then what that writer made it."""
        assert self.drift is not None
        async with self._lock:
            new = msgspec.structs.replace(
                self.state,
                status="blocked",
                error=records.error_info(self.drift),
                updated_at=self.services.clock.now(),
            )
            claims = self.services.claims
            try:
                # Staged writes (pins, attributes) came from the drifted code: dropped.
                await self._write_state_locked(new, claims.release_ops(self.id) if claims else [])
            except Superseded:
                return None
            if claims is not None:
                claims.forget(self.id)
        chain.completed(self, "blocked")
        return new

    async def enter_live(self) -> None:
        """Called when a step starts running for real: cancellation and updates land here."""
        if self.services.on_live is not None:
            self.services.on_live(self)
        if self.fatal is not None:
            raise RunEnding(self.fatal)
        self.check_alive()
        if self.interruption_due():
            raise asyncio.CancelledError()
        if self.messages_due and self.services.updates is not None:
            await self.services.updates.process(self)

    def interruption_due(self) -> bool:
        """True when a step starting now must raise ``CancelledError``: the execution
        timeout passed, or a cancel request has not been delivered yet (it is, now).

        A step in a branch of ``ctx.all``/``ctx.race`` also cancels the workflow's own
        task, which awaits the fan-out: every sibling branch is interrupted with it
        (sleeps disarmed, children asked to cancel), not only the one that looked.
        While a saga compensates (``shield``), both wait for its grace period.
        """
        if self.terminating is None and (not self.cancel_requested or self.cancel_delivered):
            return False
        if self.shield is not None and self.shield.holds(self.services.clock.now()):
            return False
        if self.terminating is None:
            self.cancel_delivered = True
        task = self.task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()
        return True

    def take_pending(
        self, step: int, kind: str, name: str, args: Sequence[Any] | None = None
    ) -> PendingStep | None:
        pend = self.pendings.pop(step, None)
        if pend is not None and (pend.kind != kind or pend.name != name):
            self.nondeterminism(step, open_call(pend), requested_call(kind, name, args))
        return pend

    # --- waiting ----------------------------------------------------------------------

    async def live(self, aw: Any, *, commits_first: bool = False) -> Any:
        """Await a live operation that a cancel request may interrupt.

        Staged writes (attributes, version pins) and deferred step records are flushed
        first, so what the workflow did is visible while it waits, however long that
        is. ``commits_first``: ``aw`` begins with a commit of the run's own, which takes
        the deferred records along (one commit instead of two).
        """
        try:
            if (self.staged or self.deferred) and RACE_BRANCH.get() is None:
                await self.flush_staged(deferred=not commits_first)
            # A cancel that arrived while this step was still recording its progress
            # (not yet waiting, so not interruptible) is delivered now, before the wait.
            self.check_alive()
            if self.interruption_due():
                raise asyncio.CancelledError()
        except BaseException:
            if asyncio.iscoroutine(aw):
                aw.close()  # never started: close it so it is not reported as leaked
            raise
        self._live_ops += 1
        try:
            return await aw
        finally:
            self._live_ops -= 1

    def wait_until(self, deadline: float) -> asyncio.Future[None]:
        """A future resolved once the engine clock reaches ``deadline``."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def fire() -> None:
            if not fut.done():
                fut.set_result(None)

        handle = self.services.clock.call_at(deadline, fire)
        self.timer_waits += 1

        def done(f: asyncio.Future[None]) -> None:
            self.timer_waits -= 1
            if f.cancelled():
                handle.cancel()

        fut.add_done_callback(done)
        return fut

    def notify(self) -> None:
        """Something a waiting step may care about changed (signal, update, review)."""
        self.wake_seq += 1
        waiters, self._changed = self._changed, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def changed(self, deadline: float | None, since: int | None = None) -> None:
        """Wait for a notification or the deadline. Nothing polls: other processes' writes
        arrive through wake-up markers (see wakeups). With ``since`` (the ``wake_seq`` read
        before the caller last looked), return at once if news came after that look."""
        self.check_alive()
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._changed.append(fut)
        if since is not None and since != self.wake_seq:
            fut.set_result(None)
        timer = (
            self.services.clock.call_at(deadline, lambda: _resolve(fut))
            if deadline is not None and not fut.done()
            else None
        )
        if self._parked is None:
            self._parked = {}
        try:
            if not fut.done() and self.messages_due:
                await self._process_updates()  # requests that came while it was busy
            if not fut.done():
                self._parked[fut] = deadline
                if self.idle:
                    self.services.on_idle(self)
            await fut
        finally:
            self._parked.pop(fut, None)
            if timer is not None:
                timer.cancel()
            if fut in self._changed:
                self._changed.remove(fut)
        if self.messages_due:
            await self._process_updates()

    @property
    def messages_due(self) -> bool:
        """True when update requests or signals may be waiting for a handler here."""
        return bool(
            (self.updates_dirty and self.update_handlers)
            or (self.signals_dirty and self.signal_handlers)
        )

    async def _process_updates(self) -> None:
        # Messages are applied in the workflow's own flow, never by an update handler's task.
        if CURRENT_HANDLER.get() is not None:
            return
        if not self.replaying and self.services.updates is not None:
            await self.services.updates.process(self)

    @property
    def idle(self) -> bool:
        """True while every live operation of the run is a wait parked in changed()."""
        parked = len(self._parked) if self._parked else 0
        return parked > 0 and parked == self._live_ops and self.handlers.all_waiting

    @property
    def waiting(self) -> bool:
        """True while every live operation is a parked wait, a timer or a wait for a child
        run: the run moves only when time passes, a message comes or a child ends."""
        waits = (len(self._parked) if self._parked else 0) + self.child_waits + self.timer_waits
        return waits > 0 and waits == self._live_ops and self.handlers.all_waiting

    def next_wake(self) -> float | None:
        """The earliest time a parked wait (or the run's execution timeout) must wake up."""
        times = [d for d in (self._parked or {}).values() if d is not None]
        if self.state.deadline is not None:
            times.append(self.state.deadline)
        return min(times) if times else None

    # --- the state record, payloads, events -------------------------------------------

    async def write_state(self, new: WorkflowState, extra: list[Op] | None = None) -> None:
        """Replace the state record, conditioned on the bytes this run last saw."""
        async with self._lock:
            await self._write_state_locked(new, extra)

    async def _write_state_locked(self, new: WorkflowState, extra: list[Op] | None) -> None:
        raw = records.encode(new)
        ops: list[Op] = [Put(key=keys.wf(self.id), value=raw), *(extra or ())]
        ops += status_change_ops(self.state, new)
        cond = [Expect(key=keys.wf(self.id), value=self.state_raw)]
        if not await self.services.committer.commit(ops, cond, workflow_id=self.id):
            raise Superseded()
        self.state, self.state_raw = new, raw

    def encode_result(self, value: object, what: str) -> bytes:
        payload = self.services.codec.encode(value)
        if len(payload) > self.services.max_payload_bytes:
            raise payload_size_error(len(payload), self.services.max_payload_bytes, what=what)
        if len(payload) > self.services.large_payload_bytes:
            self.warn(
                f"{what} is {len(payload)} bytes; large payloads slow every replay, so "
                "store big data elsewhere and pass a reference"
            )
        return payload

    def warn(self, message: str) -> None:
        """Tell the operator about a run heading for trouble (log and event)."""
        log.warning("workflow %s: %s", self.id, message)
        self.emit("warning", message=message)

    def emit(self, kind: EventKind, *, step: int | None = None, **data: Any) -> None:
        bus = self.services.events
        if bus.active:
            bus.emit(
                WorkflowEvent(
                    kind=kind,
                    workflow_id=self.id,
                    workflow_type=self.definition.name,
                    at=to_datetime(self.services.clock.now()),
                    step=step,
                    data=data,
                )
            )

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def interruptible(self) -> bool:
        """True while the workflow waits on a live step (activity, timer, message)."""
        return self._live_ops > 0

    async def adopt_state(self, state: WorkflowState, raw: bytes) -> None:
        """Take a state written by another process (e.g. a cancel request) as current."""
        async with self._lock:
            self.state, self.state_raw = state, raw
        if state.cancel_requested and not self.cancel_requested:
            self.cancel_requested = True
            self.emit("cancel_requested")
            if self._live_ops > 0 and self.task is not None:
                self.cancel_delivered = True
                self.task.cancel()

    async def request_cancel(self) -> None:
        """Record the cancel request durably, then interrupt the live step, if any."""
        async with self._lock:
            if self.cancel_requested or self.done.done():
                return
            now = self.services.clock.now()
            try:
                await self._write_state_locked(
                    msgspec.structs.replace(self.state, cancel_requested=True, updated_at=now),
                    None,
                )
            except BaseException as exc:
                # Stored or not (a lost reply), or the run changed under us: its memory may
                # be behind the store. Tear it down so it resumes from what is stored.
                self.teardown_for(exc)
                raise
            self.cancel_requested = True
        self.emit("cancel_requested")
        if self._live_ops > 0 and self.task is not None:
            self.cancel_delivered = True
            self.task.cancel()

    def arm_execution_timeout(self) -> None:
        if self.state.deadline is None:
            return

        def expire() -> None:
            if self.done.done() or self.terminating:
                return
            self.terminating = "timed_out"
            if self.task is not None:
                self.task.cancel()

        self._timeout_handle = self.services.clock.call_at(self.state.deadline, expire)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
