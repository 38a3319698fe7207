"""How a run is driven to its end: the workflow function, generations, the final commit.

:class:`Driving` (mixed into :class:`~pyweft.engine.replay.run.Run`) calls the
workflow function from the top (replaying the journal up to where it left off),
starts the next generation of the run when it continues as new, and commits the
terminal state (completed, failed, cancelled, timed out) with the deferred step
records and the close policies of its children in the same batch. An engine failure
met on the way tears the run down instead (see ``teardown``): it stays resumable.
:func:`status_change_ops` keeps the state indexes with every write of a state record.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn, cast

import msgspec

from pyweft.codec import decode_args, payload_size_error
from pyweft.definitions import WorkflowDefinition
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.drift import DriftCall, recorded_call
from pyweft.engine.replay.flow import Deferred, RunEnding, Superseded
from pyweft.engine.replay.records import (
    AppliedUpdate,
    ErrorInfo,
    PendingStep,
    StepRecord,
    WorkflowState,
)
from pyweft.engine.replay.services import ContinueAsNew
from pyweft.engine.replay.teardown import ENGINE_FAILURES
from pyweft.errors import PyweftError, RunTornDown
from pyweft.observability import chain
from pyweft.storage.base import Delete, Expect, Op, Put

if TYPE_CHECKING:
    from pyweft.engine.composition.children import ClosePlan
    from pyweft.engine.messages.updates import UpdateHandler
    from pyweft.engine.replay.handler_runs import Invocations
    from pyweft.engine.replay.run import Run
    from pyweft.engine.replay.services import RunServices

log = logging.getLogger("pyweft.run")


class Driving:
    """The driving half of a run (mixed into ``Run``; where it hands the run on, it
    casts ``self`` to the ``Run`` it is always part of)."""

    id: str
    services: RunServices
    definition: WorkflowDefinition
    handlers: Invocations
    state: WorkflowState
    state_raw: bytes
    journal: dict[int, StepRecord]
    pendings: dict[int, PendingStep]
    cancel_requested: bool
    cancel_delivered: bool
    terminating: str | None
    torn_down: RunTornDown | None
    fatal: PyweftError | None
    query_handlers: dict[str, Callable[..., Any]]
    update_handlers: dict[str, UpdateHandler]
    signal_handlers: dict[str, Any]
    has_children: bool
    answering: set[asyncio.Task[None]]
    unanswered: dict[str, str]
    staged: dict[str, Op]
    deferred: Deferred
    version_pins: dict[str, int]
    recorded_updates: dict[int, list[AppliedUpdate]]
    update_index: dict[int, int]
    logical_now: float
    _next_step: int
    _open_pendings: set[int]
    _lock: asyncio.Lock
    _timeout_handle: Any
    _rng: random.Random | None
    arm_execution_timeout: Callable[[], None]
    alloc_step: Callable[[], int]
    nondeterminism: Callable[..., NoReturn]
    encode_result: Callable[[object, str], bytes]
    warn: Callable[[str], None]
    emit: Callable[..., None]
    tear_down: Callable[..., RunTornDown]
    teardown_for: Callable[[BaseException], RunTornDown | None]
    _refuse_if_torn_down: Callable[[], None]
    flush_staged: Callable[..., Awaitable[None]]
    deferred_batch: Callable[[], tuple[Deferred, list[Op], list[Expect]]]
    restore_deferred: Callable[[Deferred], None]
    deferred_written: Callable[[Deferred], None]

    async def drive(self, make_context: Callable[[Run], Any]) -> None:
        """Run the workflow function to its end and commit the terminal state."""
        self.arm_execution_timeout()
        try:
            await self._drive(make_context)
        except BaseException as exc:
            if not isinstance(exc, RunTornDown) and self.teardown_for(exc) is None:
                raise
            if self.torn_down is None:  # raised by the workflow itself: honour it all the same
                self.tear_down(exc.reason if isinstance(exc, RunTornDown) else "torn down")
            log.info(
                "workflow %s torn down: %s",
                self.id,
                self.torn_down.reason if self.torn_down else "",
            )
        finally:
            if self._timeout_handle is not None:
                self._timeout_handle.cancel()

    async def _drive(self, make_context: Callable[[Run], Any]) -> None:
        while True:
            try:
                await self._drive_once(make_context)
                return
            except ContinueAsNew as cont:
                await self._continue_as_new(cont.args_)

    async def _continue_as_new(self, args: tuple[Any, ...]) -> None:
        """End this run's history and start it again, same id, with ``args``."""
        from pyweft.codec import encode_args

        await self.answers_written()
        await self.handlers.abandon(cast("Run", self), "with continue_as_new")
        self._refuse_if_torn_down()
        if self.deferred:  # the generation's last steps, before its history is read
            await self.flush_staged()
        payload = encode_args(self.services.codec, args)
        if len(payload) > self.services.max_payload_bytes:
            raise payload_size_error(
                len(payload), self.services.max_payload_bytes, what="continue_as_new arguments"
            )
        prefix, start, end = keys.run_range(self.id)
        rows = await self.services.storage.scan(prefix, start=start, end=end)
        keep = {prefix, keys.attributes(self.id)}
        deletes: list[Op] = [
            Delete(key=k) for k, _ in rows if keys.belongs_to_run(k, prefix) and k not in keep
        ]
        # The generation ends like a run does: its children's close policies are applied in
        # the same batch (a child started by this generation must not outlive it unasked).
        host = self.services.children
        while True:
            plan = None
            if self.has_children and host is not None:
                plan = await host.close_plan(self.id, self.services.clock.now())
            now = self.services.clock.now()
            if await self._commit_generation(payload, now, deletes, plan):
                break
        self.has_children = False
        self.journal, self.pendings, self._open_pendings = {}, {}, set()
        self.recorded_updates, self.update_index, self.version_pins = {}, {}, {}
        self.handlers.reset()
        self.query_handlers, self.update_handlers, self.signal_handlers = {}, {}, {}
        self._next_step = 0
        self.logical_now = now
        self._rng = None  # the new generation's sequence, seeded on first use
        if plan is not None and plan.asked and host is not None:
            await host.close_children(self.id, plan.asked)

    async def _commit_generation(
        self, payload: bytes, now: float, deletes: list[Op], plan: ClosePlan | None
    ) -> bool:
        """Write the next generation's state. ``False`` if a child changed since ``plan``
        was read (read the children again); ``Superseded`` if the run itself changed."""
        async with self._lock:
            # A cancel the old generation consumed is gone for good; one it never saw (it
            # came after its last step) is the new generation's to take.
            carry_cancel = self.cancel_requested and not self.cancel_delivered
            new = msgspec.structs.replace(
                self.state,
                args=payload,
                generation=self.state.generation + 1,
                generation_started_at=now,
                updated_at=now,
                cancel_requested=carry_cancel,
            )
            raw = records.encode(new)
            staged, self.staged = self.staged, {}
            ops: list[Op] = [Put(key=keys.wf(self.id), value=raw), *deletes, *staged.values()]
            ops += status_change_ops(self.state, new)
            conditions = [Expect(key=keys.wf(self.id), value=self.state_raw)]
            if plan is not None:
                ops += plan.ops
                conditions += plan.conditions
            if not await self.services.committer.commit(ops, conditions, workflow_id=self.id):
                self.staged = {**staged, **self.staged}
                if plan is None or not plan.conditions:
                    raise Superseded()
                if await self.services.storage.get(keys.wf(self.id)) != self.state_raw:
                    raise Superseded()
                return False
            self.state, self.state_raw = new, raw
            self.cancel_requested, self.cancel_delivered = carry_cancel, False
        return True

    async def _drive_once(self, make_context: Callable[[Run], Any]) -> None:
        run = cast("Run", self)
        try:
            limit = self.definition.max_history_steps or self.services.max_history_steps
            if self.journal and max(self.journal) > limit:  # a run recorded under a higher limit
                self._next_step = max(self.journal)
                self.alloc_step()  # raises HistoryLimitError: fails it without replaying
            args = decode_args(self.services.codec, self.state.args, self.definition.param_types)
            value = await chain.workflow_fn(run)(make_context(run), *args)
            if self.torn_down is not None:
                return  # the workflow swallowed its teardown: record nothing, resume later
            if self.terminating is not None:
                raise asyncio.CancelledError()
            if self.fatal is not None:
                raise RunEnding(self.fatal)
            if self.journal:
                step = min(self.journal)
                rec = self.journal[step]
                self.nondeterminism(
                    step,
                    recorded_call(rec),
                    DriftCall(kind=None, name=None, detail="nothing (it returned)"),
                    "returned_early",
                )
            payload = self.encode_result(value, f"result of workflow {self.id!r}")
            await self.finish("completed", result=payload)
        except RunEnding as ending:
            if self.torn_down is not None:
                raise
            await self.finish("failed", error=records.error_info(ending.error))
        except asyncio.CancelledError:
            if self.torn_down is not None:
                raise
            if self.terminating == "timed_out":
                await self.finish(
                    "timed_out",
                    error=ErrorInfo(
                        type="WorkflowTimeoutError",
                        message="the run exceeded its execution_timeout",
                        code="WorkflowTimeoutError",
                    ),
                )
            elif self.cancel_requested:
                await self.finish("cancelled")
            else:
                await self.finish("failed", error=records.error_info(asyncio.CancelledError()))
        except Exception as exc:
            if self.torn_down is not None or isinstance(exc, ENGINE_FAILURES):
                raise  # an engine failure, never the workflow's outcome: drive() tears down
            await self.finish("failed", error=records.error_info(self.fatal or exc))

    async def answers_written(self) -> None:
        """Wait until every answer given with respond() is stored (the run is torn down
        if one could not be: replay gives it again), then check the run is still ours."""
        while self.answering:
            writing = list(self.answering)
            await asyncio.gather(*writing, return_exceptions=True)
            self.answering.difference_update(writing)
        self._refuse_if_torn_down()

    async def finish(
        self, status: str, *, result: bytes | None = None, error: ErrorInfo | None = None
    ) -> None:
        """Commit the run's end, with its children's close policies in the same batch."""
        await self.answers_written()
        run = cast("Run", self)
        await self.handlers.abandon(run, status)
        self._refuse_if_torn_down()
        if self.unanswered:
            self.warn(
                f"the run ends {status} with {len(self.unanswered)} update(s) taken by "
                f"wait_for_update and never answered ({', '.join(sorted(self.unanswered))}): "
                "their callers get WorkflowTerminalError. Answer each request with "
                "respond() or fail() before returning."
            )
        host = self.services.children
        while True:
            plan = None
            if self.has_children and host is not None:
                plan = await host.close_plan(self.id, self.services.clock.now())
            if await self._commit_end(status, result, error, plan):
                break
        self.emit(status)
        chain.completed(run, status)
        if plan is not None and plan.asked and host is not None:
            await host.close_children(self.id, plan.asked)

    async def _commit_end(
        self,
        status: str,
        result: bytes | None,
        error: ErrorInfo | None,
        plan: ClosePlan | None,
    ) -> bool:
        """Write the terminal state. ``False`` if a child changed since ``plan`` was read."""
        async with self._lock:
            old = self.state
            now = self.services.clock.now()
            new = msgspec.structs.replace(
                old, status=status, result=result, error=error, updated_at=now, ended_at=now
            )
            raw = records.encode(new)
            ops: list[Op] = [Put(key=keys.wf(self.id), value=raw), Delete(key=keys.wake(self.id))]
            ops += status_change_ops(old, new)
            claims = self.services.claims
            if claims is not None:
                ops += claims.release_ops(self.id)
            for step in sorted(self._open_pendings):
                ops.append(Delete(key=keys.pending(self.id, step)))
            staged, self.staged = self.staged, {}
            ops += staged.values()
            conditions = [Expect(key=keys.wf(self.id), value=self.state_raw)]
            # Step records still deferred go with the end (a finished run replays whole).
            deferred, deferred_ops, deferred_conds = self.deferred_batch()
            ops += deferred_ops
            conditions += deferred_conds
            if plan is not None:
                ops += plan.ops
                conditions += plan.conditions
            try:
                ended = await self.services.committer.commit(ops, conditions, workflow_id=self.id)
            except BaseException:
                self.restore_deferred(deferred)  # (see StepCommits._commit_entries)
                raise
            if not ended:
                self.staged = {**staged, **self.staged}
                self.restore_deferred(deferred)
                if plan is None or not plan.conditions:
                    raise Superseded()
                if await self.services.storage.get(keys.wf(self.id)) != self.state_raw:
                    raise Superseded()
                steps = [c.key for c in deferred_conds if c.value is None]
                if any([await self.services.storage.get(k) is not None for k in steps]):
                    raise Superseded()  # another writer recorded a deferred step
                return False  # a child moved on meanwhile: read the children again
            self.deferred_written(deferred)
            self.state, self.state_raw = new, raw
            self._open_pendings.clear()
            if claims is not None:
                claims.forget(self.id)
        return True


def status_change_ops(old: WorkflowState, new: WorkflowState) -> list[Op]:
    """Index maintenance when the state record changes from ``old`` to ``new``."""
    ops: list[Op] = []
    if old.updated_at != new.updated_at:
        ops.append(Delete(key=keys.updated_index(old.id, old.updated_at)))
        ops.append(Put(key=keys.updated_index(new.id, new.updated_at), value=b""))
    if old.status == new.status:
        return ops
    for key in keys.status_index_keys(old.id, old.type, old.status, old.created_at):
        ops.append(Delete(key=key))
    for key in keys.status_index_keys(old.id, old.type, new.status, old.created_at):
        ops.append(Put(key=key, value=b""))
    if new.status in records.TERMINAL_STATUSES:
        ended = new.ended_at if new.ended_at is not None else new.updated_at
        ops.append(Put(key=keys.end_index(new.status, ended, new.id), value=b""))
        if new.queue_slot_key is not None:  # a queued run's end frees its slot
            ops.append(Delete(key=new.queue_slot_key))
    if old.status == "enqueued" and old.queue_wait_key is not None:
        ops.append(Delete(key=old.queue_wait_key))  # dispatched or cancelled: off the queue
    return ops
