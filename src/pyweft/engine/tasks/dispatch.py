"""The engine's side of task queues: hand an attempt to workers, and wait for its outcome.

``Engine(serve_queues=[...])`` says which activity queues the engine runs itself
(``None``, the default: all of them). An attempt of an activity on any other
queue is written as a task (see :mod:`.records`) in the same batch as the step's
progress record, which points at it; the step then waits for the outcome. It
does not poll per task: workers ring when they store an outcome (PostgreSQL
NOTIFY, or the SQLite doorbell), and one scan of the outcomes serves every
waiting step; the scan also runs every ``poll_interval`` in case a ring was lost.

After a restart, replay finds the progress record pointing at the task and
waits for the same task instead of writing another. When the step stops waiting
(the run is cancelled, its branch lost a race, its budget ran out) the task is
deleted with the run's next commit, which a worker holding it notices at its
next heartbeat as a cancellation. The engine also fails attempts whose worker
stopped heartbeating (see :func:`.claims.reap`), so a dead worker's tasks are
retried even when no other worker is around to notice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import msgspec

from pyweft.codec import encode_args
from pyweft.definitions import ActivityDefinition
from pyweft.engine.replay.records import ErrorInfo, PendingStep
from pyweft.engine.replay.run import Run
from pyweft.engine.steps.activity_context import ActivityContext
from pyweft.engine.tasks import claims
from pyweft.engine.tasks import records as tr
from pyweft.engine.tasks.doorbell import Notifier, Unlisten
from pyweft.errors import ActivityTimeoutError, ApplicationError
from pyweft.storage.base import Delete, Op, Put, Storage

log = logging.getLogger("pyweft.tasks")

_SCAN_LIMIT = 2000


class TaskDispatcher:
    """Writes tasks for queues this engine does not serve and waits for their outcomes."""

    def __init__(
        self,
        storage: Storage,
        serve_queues: frozenset[str] | None,
        *,
        poll_interval: float,
        clock_now: Any,
    ) -> None:
        self._storage = storage
        self.serve_queues = serve_queues
        self._poll_s = poll_interval
        self._now = clock_now
        self._notifier = Notifier(storage)
        self._waiting: dict[str, _Waiter] = {}
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unlisten: Unlisten | None = None
        self._reaped_at = 0.0
        self._tasks: set[asyncio.Task[None]] = set()
        self._started = False

    def _background(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _withdraw(self, run: Run, ops: list[Op]) -> None:
        await _withdraw_now(run, ops)

    def was_dispatched(self, base: PendingStep) -> bool:
        """The step's open attempt was written as a task (by an engine that did not serve
        its queue): it is waited for, not run again here."""
        return base.ref is not None and base.ref.startswith(tr.REF_PREFIX)

    def serves(self, queue: str) -> bool:
        return self.serve_queues is None or queue in self.serve_queues

    async def start(self) -> None:
        self._started = True
        self._unlisten = await self._notifier.listen(tr.RESULTS_TOPIC, self._kick.set)
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="pyweft-tasks")

    async def _ensure_started(self) -> None:
        """An engine serving every queue starts listening only when a task concerns it
        (an attempt an earlier engine wrote as a task)."""
        if not self._started:
            await self.start()

    async def stop(self) -> None:
        self._started = True  # never again after a stop
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        unlisten, self._unlisten = self._unlisten, None
        if unlisten is not None:
            await unlisten()

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_s):
                    await self._kick.wait()
            self._kick.clear()
            try:
                await self._look()
            except Exception:
                log.exception("looking for task outcomes failed; trying again next interval")

    async def _look(self) -> None:
        if not self._waiting:
            return
        now = self._now()
        if now - self._reaped_at >= self._poll_s:  # expired claims: once per interval
            self._reaped_at = now
            if await claims.reap(self._storage, now):
                self._notifier.ring_soon(tr.RESULTS_TOPIC)
        start: str | None = None
        while True:
            found = await self._storage.scan(tr.RESULT_PREFIX, start=start, limit=_SCAN_LIMIT)
            for key, raw in found:
                waiter = self._waiting.get(key[len(tr.RESULT_PREFIX) :])
                if waiter is not None and waiter.raw is None:
                    waiter.raw = raw  # the scan read it: no second trip for the step
                    waiter.event.set()
            if len(found) < _SCAN_LIMIT:
                return
            start = found[-1][0] + "\x00"

    async def execute(
        self,
        run: Run,
        act: ActivityDefinition,
        args: tuple[Any, ...],
        actx: ActivityContext,
        base: PendingStep,
        queue: str,
        deadline: float | None,
        deadline_kind: str,
    ) -> Any:
        """Run one attempt on a worker: write its task (unless replay found it written) and
        return its value, or raise its failure."""
        await self._ensure_started()
        services = run.services
        if deadline_kind == "attempt":
            # The worker times the attempt from when it starts it (time in line does not
            # count); here only the schedule_to_close budget cuts the wait short.
            deadline = None
        tid = tr.task_id(run.id, run.state.generation, actx.step, actx.attempt)
        ref = tr.REF_PREFIX + tid
        rkey, tkey = tr.result_key(tid), tr.task_key(tid)
        ready: str | None = None
        task: tr.Task | None = None
        if base.ref != ref:
            now = services.clock.now()
            ready = tr.ready_key(queue, now, tid)
            task = tr.Task(
                id=tid,
                queue=queue,
                workflow_id=run.id,
                workflow_type=run.definition.name,
                activity=act.name,
                step=actx.step,
                attempt=actx.attempt,
                generation=run.state.generation,
                execution_token=actx.workflow_execution_token,
                args=encode_args(services.codec, args),
                created_at=now,
                scheduled_at=actx.scheduled_at.timestamp(),
                ready_key=ready,
                visibility_s=act.visibility_timeout_s or tr.DEFAULT_VISIBILITY_S,
                timeout_s=act.timeout_s,
                heartbeat_timeout_s=act.heartbeat_timeout_s,
                headers=dict(run.state.headers) if run.state.headers else None,
            )
        waiter_for = self._waiting.setdefault(tid, _Waiter())
        fresh = False
        if task is not None and ready is not None:
            raw_task = tr.encode(task)
            # Workers hear of it from the write itself where the store can say so.
            rings = (tr.TASKS_TOPIC,) if services.committer.rings_on_commit else ()
            try:
                await run.commit_pending(
                    msgspec.structs.replace(base, ref=ref),
                    [Put(key=tkey, value=raw_task), Put(key=ready, value=raw_task)],
                    rings=rings,
                )
            except BaseException:
                self._waiting.pop(tid, None)
                if not run.stopping:
                    # Interrupted while writing (e.g. a race lost meanwhile): the write may
                    # still land, so withdraw what it would leave (queued after it).
                    withdraw: list[Op] = [Delete(key=tkey), Delete(key=ready)]
                    for op in withdraw:
                        run.staged[op.key] = op
                    self._background(self._withdraw(run, withdraw))
                raise
            if not rings:
                self._notifier.ring_soon(tr.TASKS_TOPIC)
            fresh = True  # just written: its outcome can only come with a ring or a scan
        elif run.deferred:  # no write of its own to take them along (live() left them)
            await run.flush_staged()
        event = waiter_for.event
        try:
            while True:
                raw = waiter_for.raw
                if raw is None and not fresh:
                    event.clear()
                    raw = await services.storage.get(rkey)
                fresh = False
                if raw is not None:
                    break
                if deadline is not None and services.clock.now() >= deadline:
                    limit = "timeout" if deadline_kind == "attempt" else "schedule_to_close budget"
                    raise ActivityTimeoutError(
                        f"activity {act.name!r} on queue {queue!r} did not finish within its "
                        f"{limit}",
                        kind=deadline_kind,
                    )
                waiter: asyncio.Future[Any] = asyncio.ensure_future(event.wait())
                try:
                    if deadline is None:
                        await waiter
                    else:
                        timer: asyncio.Future[Any] = run.wait_until(deadline)
                        try:
                            await asyncio.wait({waiter, timer}, return_when="FIRST_COMPLETED")
                        finally:
                            timer.cancel()
                finally:
                    waiter.cancel()
        except BaseException:
            if not run.stopping:
                # The step stops waiting for good (cancelled, lost a race, out of budget):
                # withdraw the task, which a worker holding it takes as a cancellation.
                # Through the run's fenced commit, now (the run may have nothing more to
                # commit, e.g. a race that just ended it), and staged with its next commit
                # in case this write fails.
                ops: list[Op] = [Delete(key=tkey), Delete(key=rkey)]
                if ready is not None:
                    ops.append(Delete(key=ready))
                for op in ops:
                    run.staged[op.key] = op
                self._background(self._withdraw(run, ops))
            raise
        finally:
            self._waiting.pop(tid, None)
        result = tr.decode_result(raw, key=rkey)
        if result.ok:
            # The outcome stays stored until the step's record replaces it (in one batch):
            # the record can wait for the run's next commit (see step_commits.defer_step).
            run.task_outcomes[actx.step] = Delete(key=rkey)
            return None if result.value is None else services.codec.decode(result.value)
        run.staged[rkey] = Delete(key=rkey)  # removed with the step's next record
        raise remote_failure(result.error, result)


async def _withdraw_now(run: Run, ops: list[Op]) -> None:
    try:
        await run.services.committer.commit(ops, workflow_id=run.id)
    except Exception as exc:  # staged with the run's next commit as well
        log.debug("withdrawing a task of run %s failed: %s", run.id, exc)


class _Waiter:
    """A step waiting for a task's outcome; the scan that finds it hands it over."""

    __slots__ = ("event", "raw")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.raw: bytes | None = None


def remote_failure(info: ErrorInfo | None, result: tr.TaskResult) -> Exception:
    """The exception a worker's failed attempt stands for, for the step's retry policy."""
    err = info or ErrorInfo(type="ApplicationError", message="the worker reported a failure")
    if result.timeout_kind is not None:
        return ActivityTimeoutError(err.message, kind=result.timeout_kind)
    return ApplicationError(
        f"{err.message} (on worker {result.worker})",
        type=err.type,
        non_retryable=result.non_retryable,
    )
