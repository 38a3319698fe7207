"""Drives one workflow run: step numbering, replay from the journal, live steps.

Recovery re-runs the workflow function from the top. Each durable operation
takes the next step number when it is *called*; if the journal holds that
step, its recorded outcome is returned at once (replay), otherwise the step
runs live and its outcome is committed before the workflow sees it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from pyweft.clock import Clock
from pyweft.codec import PayloadCodec, decode_args, payload_size_error
from pyweft.definitions import ActivityDefinition, RetryPolicy, WorkflowDefinition
from pyweft.engine import keys, records
from pyweft.engine.commit import Committer
from pyweft.engine.records import ErrorInfo, PendingStep, StepRecord, WorkflowState
from pyweft.errors import (
    ActivityError,
    ActivityTimeoutError,
    NonDeterminismError,
    PayloadError,
    StorageError,
)
from pyweft.storage.base import Delete, Expect, Op, Put

T = TypeVar("T")
log = logging.getLogger("pyweft.run")


@dataclass(slots=True)
class RunServices:
    """What a run needs from its engine (kept narrow so runs stay testable)."""

    committer: Committer
    clock: Clock
    codec: PayloadCodec
    executor: Executor
    activities: dict[str, ActivityDefinition]
    max_payload_bytes: int


class Superseded(BaseException):
    """Another writer committed this run's step or state: stop without writing."""


class Run:
    """The in-memory driver of one run. Created by the engine, one per live run."""

    def __init__(
        self,
        services: RunServices,
        definition: WorkflowDefinition,
        state: WorkflowState,
        state_raw: bytes,
        journal: dict[int, StepRecord],
        pendings: dict[int, PendingStep],
    ) -> None:
        self.services = services
        self.definition = definition
        self.state = state
        self.state_raw = state_raw
        self.id = state.id
        self.journal = journal
        self.pendings = pendings
        self.cancel_requested = state.cancel_requested
        # A cancel is raised into the workflow once; cleanup steps after it run normally.
        self.cancel_delivered = False
        self.stopping = False
        self.fatal: NonDeterminismError | None = None
        self.task: asyncio.Task[None] | None = None
        self.done: asyncio.Future[WorkflowState] = asyncio.get_running_loop().create_future()
        self._next_step = 0
        self._live_ops = 0
        self._open_pendings: set[int] = set(pendings)
        self._lock = asyncio.Lock()
        self._journal_prefix = keys.journal_prefix(state.id)

    # --- step allocation and replay -------------------------------------------------

    def alloc_step(self) -> int:
        self._next_step += 1
        return self._next_step

    @property
    def replaying(self) -> bool:
        """True while the journal still holds steps the code has not reached again."""
        return bool(self.journal)

    def replay(self, step: int, kind: str, name: str) -> StepRecord | None:
        if self.fatal is not None:
            raise self.fatal
        rec = self.journal.pop(step, None)
        if rec is None:
            return None
        if rec.kind != kind or rec.name != name:
            self._nondeterminism(step, f"{rec.kind} {rec.name!r}", f"{kind} {name!r}")
        return rec

    def _nondeterminism(self, step: int, recorded: str, requested: str) -> None:
        self.fatal = NonDeterminismError(
            f"workflow {self.id!r} is not deterministic at step {step}: the journal recorded "
            f"{recorded} but the code now asks for {requested}. Code changes that reorder, add "
            "or remove durable steps must not be deployed under running workflows; keep the "
            "old order or version the workflow.",
            workflow_id=self.id,
            step=step,
        )
        raise self.fatal

    def enter_live(self) -> None:
        """Called when a step starts running for real: deliver cancellation here."""
        if self.fatal is not None:
            raise self.fatal
        if self.cancel_requested and not self.cancel_delivered:
            self.cancel_delivered = True
            raise asyncio.CancelledError()

    async def live(self, aw: Awaitable[T]) -> T:
        """Await a live operation that a cancel request may interrupt."""
        self._live_ops += 1
        try:
            return await aw
        finally:
            self._live_ops -= 1

    def wait_until(self, deadline: float) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def fire() -> None:
            if not fut.done():
                fut.set_result(None)

        handle = self.services.clock.call_at(deadline, fire)
        fut.add_done_callback(lambda f: handle.cancel() if f.cancelled() else None)
        return fut

    # --- commits ------------------------------------------------------------------------

    async def commit_step(self, rec: StepRecord) -> None:
        key = f"{self._journal_prefix}{rec.step:010d}"
        ops: list[Op] = [Put(key=key, value=records.encode(rec))]
        if rec.step in self._open_pendings:
            ops.append(Delete(key=keys.pending(self.id, rec.step)))
        if not await self.services.committer.commit(ops, [Expect(key=key, value=None)]):
            raise Superseded()
        self._open_pendings.discard(rec.step)

    async def commit_pending(self, pend: PendingStep) -> None:
        journal_key = keys.journal(self.id, pend.step)
        ops = [Put(key=keys.pending(self.id, pend.step), value=records.encode(pend))]
        if not await self.services.committer.commit(ops, [Expect(key=journal_key, value=None)]):
            raise Superseded()
        self._open_pendings.add(pend.step)

    async def write_state(self, new: WorkflowState, extra: list[Op] | None = None) -> None:
        """Replace the state record, conditioned on the bytes this run last saw."""
        raw = records.encode(new)
        ops: list[Op] = [Put(key=keys.wf(self.id), value=raw), *(extra or ())]
        cond = [Expect(key=keys.wf(self.id), value=self.state_raw)]
        if not await self.services.committer.commit(ops, cond):
            raise Superseded()
        self.state, self.state_raw = new, raw

    # --- operations -----------------------------------------------------------------

    def decode_value(self, rec: StepRecord, into: object) -> Any:
        return None if rec.value is None else self.services.codec.decode(rec.value, into)

    def activity_error(self, rec: StepRecord) -> ActivityError:
        err = rec.error or ErrorInfo(type="Exception", message="")
        return ActivityError(
            f"activity {rec.name!r} (step {rec.step}) failed after {rec.attempts} attempt(s): "
            f"{err.type}: {err.message}",
            activity_name=rec.name,
            step=rec.step,
            attempts=rec.attempts,
            error_type=err.type,
            error_message=err.message,
        )

    async def activity(
        self,
        step: int,
        act: ActivityDefinition,
        args: tuple[Any, ...],
        retry: RetryPolicy,
        timeout_s: float | None,
        budget_s: float | None,
    ) -> Any:
        rec = self.replay(step, "activity", act.name)
        if rec is not None:
            if rec.ok:
                return self.decode_value(rec, act.result_type)
            raise self.activity_error(rec)
        self.enter_live()
        clock = self.services.clock
        pend = self._take_pending(step, "activity", act.name)
        attempt = pend.attempt if pend else 0
        first = pend.first_started_at if pend else clock.now()
        if pend is not None and pend.deadline > clock.now():
            await self.live(self.wait_until(pend.deadline))
        while True:
            attempt += 1
            attempt_timeout = timeout_s
            if budget_s is not None:
                left = budget_s - (clock.now() - first)
                attempt_timeout = left if timeout_s is None else min(timeout_s, left)
            try:
                if attempt_timeout is not None and attempt_timeout <= 0:
                    raise ActivityTimeoutError(
                        f"activity {act.name!r} ran out of its schedule_to_close budget"
                    )
                value = await self.live(self._execute(act, args, attempt_timeout))
                payload = self._encode_result(value, f"result of activity {act.name!r}")
            except Exception as exc:
                now = clock.now()
                delay = retry.delay_after(attempt)
                give_up = (
                    isinstance(exc, PayloadError)
                    or not retry.is_retryable(exc)
                    or attempt >= retry.max_attempts
                    or (budget_s is not None and now + delay - first >= budget_s)
                )
                info = records.error_info(exc)
                if give_up:
                    failed = StepRecord(
                        step=step,
                        kind="activity",
                        name=act.name,
                        ok=False,
                        started_at=first,
                        finished_at=now,
                        attempts=attempt,
                        error=info,
                    )
                    await self.commit_step(failed)
                    raise self.activity_error(failed) from exc
                log.info(
                    "activity %s (workflow %s step %d) attempt %d failed: %s; retrying in %.3fs",
                    act.name,
                    self.id,
                    step,
                    attempt,
                    info.message,
                    delay,
                )
                retry_at = now + delay
                await self.commit_pending(
                    PendingStep(
                        step=step,
                        kind="activity",
                        name=act.name,
                        deadline=retry_at,
                        attempt=attempt,
                        first_started_at=first,
                        last_error=info,
                    )
                )
                await self.live(self.wait_until(retry_at))
                continue
            done = StepRecord(
                step=step,
                kind="activity",
                name=act.name,
                ok=True,
                started_at=first,
                finished_at=clock.now(),
                attempts=attempt,
                value=payload,
            )
            await self.commit_step(done)
            return self.services.codec.decode(payload, act.result_type)

    async def _execute(
        self, act: ActivityDefinition, args: tuple[Any, ...], timeout_s: float | None
    ) -> Any:
        if act.is_async:
            if timeout_s is None:
                return await act.fn(*args)
            return await self._with_timeout(asyncio.ensure_future(act.fn(*args)), act, timeout_s)
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self.services.executor, functools.partial(act.fn, *args))
        if timeout_s is None:
            return await fut
        return await self._with_timeout(fut, act, timeout_s)

    async def _with_timeout(
        self, fut: asyncio.Future[Any], act: ActivityDefinition, timeout_s: float
    ) -> Any:
        """Await ``fut`` but cancel it once ``timeout_s`` passes on the engine clock."""
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            fut.cancel()

        clock = self.services.clock
        handle = clock.call_at(clock.now() + timeout_s, expire)
        try:
            return await fut
        except asyncio.CancelledError:
            if expired:
                raise ActivityTimeoutError(
                    f"activity {act.name!r} attempt timed out after {timeout_s:.3f}s"
                ) from None
            raise
        finally:
            handle.cancel()
            if not fut.done():
                fut.cancel()

    def _take_pending(self, step: int, kind: str, name: str) -> PendingStep | None:
        pend = self.pendings.pop(step, None)
        if pend is not None and (pend.kind != kind or pend.name != name):
            self._nondeterminism(step, f"an open {pend.kind} {pend.name!r}", f"{kind} {name!r}")
        return pend

    def _encode_result(self, value: object, what: str) -> bytes:
        payload = self.services.codec.encode(value)
        if len(payload) > self.services.max_payload_bytes:
            raise payload_size_error(len(payload), self.services.max_payload_bytes, what=what)
        return payload

    async def sleep_until(self, step: int, deadline: float | None, seconds: float) -> None:
        """A durable sleep. ``deadline`` wins when given, else now + ``seconds``."""
        if self.replay(step, "sleep", "sleep") is not None:
            return
        self.enter_live()
        clock = self.services.clock
        pend = self._take_pending(step, "sleep", "sleep")
        started = pend.first_started_at if pend else clock.now()
        if pend is None:
            until = deadline if deadline is not None else started + seconds
            if until > started:
                pend = PendingStep(
                    step=step, kind="sleep", name="sleep", deadline=until, first_started_at=started
                )
                await self.commit_pending(pend)
        if pend is not None:
            await self.live(self.wait_until(pend.deadline))
        await self.commit_step(
            StepRecord(
                step=step,
                kind="sleep",
                name="sleep",
                ok=True,
                started_at=started,
                finished_at=clock.now(),
            )
        )

    # --- lifecycle ----------------------------------------------------------------------

    async def request_cancel(self) -> None:
        """Record the cancel request durably, then interrupt the live step, if any."""
        async with self._lock:
            if self.cancel_requested or self.done.done():
                return
            now = self.services.clock.now()
            await self.write_state(
                msgspec.structs.replace(self.state, cancel_requested=True, updated_at=now)
            )
            self.cancel_requested = True
        if self._live_ops > 0 and self.task is not None:
            self.cancel_delivered = True
            self.task.cancel()

    async def drive(self, make_context: Callable[[Run], Any]) -> None:
        """Run the workflow function to its end and commit the terminal state."""
        try:
            args = decode_args(self.services.codec, self.state.args, self.definition.param_types)
            value = await self.definition.fn(make_context(self), *args)
            if self.fatal is not None:
                raise self.fatal
            if self.journal:
                step = min(self.journal)
                rec = self.journal[step]
                self._nondeterminism(step, f"{rec.kind} {rec.name!r}", "nothing (it returned)")
            payload = self._encode_result(value, f"result of workflow {self.id!r}")
            await self._finish("completed", result=payload)
        except asyncio.CancelledError:
            if self.stopping or not self.cancel_requested:
                raise
            await self._finish("cancelled")
        except Superseded:
            log.warning("workflow %s was advanced by another writer; this engine stops it", self.id)
        except StorageError:
            raise
        except Exception as exc:
            if self.stopping:
                raise
            await self._finish("failed", error=records.error_info(self.fatal or exc))

    async def _finish(
        self, status: str, *, result: bytes | None = None, error: ErrorInfo | None = None
    ) -> None:
        async with self._lock:
            old = self.state
            new = msgspec.structs.replace(
                old, status=status, result=result, error=error, updated_at=self.services.clock.now()
            )
            ops: list[Op] = []
            for key in keys.status_index_keys(old.id, old.type, old.status, old.created_at):
                ops.append(Delete(key=key))
            for key in keys.status_index_keys(old.id, old.type, status, old.created_at):
                ops.append(Put(key=key, value=b""))
            for step in sorted(self._open_pendings):
                ops.append(Delete(key=keys.pending(self.id, step)))
            await self.write_state(new, ops)
            self._open_pendings.clear()
