"""``Worker``: a process that serves activity task queues for engines on the same store.

A worker claims ready tasks of its queues (one conditional batch each, so no two
workers hold one task), runs each with the full activity context, and stores the
outcome fenced by its claim: a worker that lost the claim meanwhile (it expired,
or the run cancelled the step) has its late result refused and logged. Its
heartbeat, every ``heartbeat_interval`` (and at least three times per visibility
timeout of what it holds), pushes its claims on, notices lost ones (the attempt
is cancelled), writes its liveness record, reads drain requests, and fails the
attempts of workers that stopped heartbeating (their claims expired), so the
step's retry policy sends them to another worker.

Stopping (``async with`` exit, ``stop()``, SIGTERM under ``run()``) drains: no
more claims, in-flight attempts get up to ``drain_timeout`` to finish, and the
rest are cancelled and handed back for another worker as the same attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import msgspec

from pyweft.clock import Clock, SystemClock
from pyweft.codec import DefaultPayloadCodec, PayloadCodec
from pyweft.definitions import ActivityDefinition, Duration
from pyweft.durations import parse_duration
from pyweft.engine.steps.activity_context import ActivityContext
from pyweft.engine.tasks import claims
from pyweft.engine.tasks import records as tr
from pyweft.engine.tasks.claims import Claimed
from pyweft.engine.tasks.doorbell import Notifier, Unlisten
from pyweft.errors import ConfigurationError
from pyweft.observability import flow
from pyweft.observability.interceptors import Interceptor
from pyweft.observability.worker_side import activity_chain
from pyweft.storage.base import Delete, Expect, Get, Put, Storage, read_many
from pyweft.storage.factory import open_storage
from pyweft.worker.config import activity_table, check_concurrency, check_queues
from pyweft.worker.runner import run_task

log = logging.getLogger("pyweft.worker")
T = TypeVar("T")

_GATHER_S = 0.005  # how long a busy worker waits for more free slots before it claims
# After a claim that found nothing, how long the next one waits, when it comes within
# _BUSY_S. Every ring wakes every worker of the queue, so a worker that came away empty
# while tasks keep coming was most likely beaten to them by another; waiting lets the
# next few writes gather for one claim to take together, instead of each ring costing
# every worker a round trip that finds nothing. A worker idle for longer claims at once.
_AFTER_EMPTY_S = 0.005
_BUSY_S = 0.05
_FORGET_GONE_S = 24 * 3600.0  # a dead worker's record stays visible (status "gone") this long


@dataclass(slots=True, eq=False)
class _Job:
    claimed: Claimed
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task[None] | None = None
    actx: list[ActivityContext] = field(default_factory=list)
    lost: str | None = None  # why the claim is gone (nothing is written for it then)
    done: bool = False


class Worker:
    """Serve ``queues`` with ``activities`` from the store at ``storage`` (URL or adapter).

    ``concurrency``: attempts run at once. ``worker_id``: unique per live worker
    (default: host, pid and a random suffix). ``poll_interval``: how often it looks
    for tasks when no notification came (PostgreSQL notifies, SQLite rings a local
    doorbell). ``drain_timeout``: how long stopping waits for in-flight attempts.
    ``heartbeat_interval``: how often it writes its liveness record.
    ``interceptors``: :class:`~pyweft.Interceptor` instances whose ``execute_activity``
    runs around each attempt here, the first outermost (the run's headers are current).
    """

    def __init__(
        self,
        storage: str | Storage | None = None,
        *,
        activities: Iterable[Callable[..., Any]],
        queues: Iterable[str] = (tr.DEFAULT_QUEUE,),
        concurrency: int = 8,
        worker_id: str | None = None,
        poll_interval: float = 1.0,
        drain_timeout: Duration = 30.0,
        heartbeat_interval: Duration = 5.0,
        clock: Clock | None = None,
        codec: PayloadCodec | None = None,
        interceptors: Iterable[Interceptor] = (),
    ) -> None:
        self.queues = check_queues(queues)
        check_concurrency(concurrency)
        if not isinstance(poll_interval, int | float) or not 0 < poll_interval <= 60:
            raise ConfigurationError(
                f"poll_interval must be a number of seconds in (0, 60], got {poll_interval!r}"
            )
        if worker_id is not None and (not isinstance(worker_id, str) or not worker_id.strip()):
            raise ConfigurationError(f"worker_id must be a non-empty string, got {worker_id!r}")
        self._activities: dict[str, ActivityDefinition] = activity_table(activities)
        self.concurrency = concurrency
        # All of them (dispatch latency, queue depth) and those around each attempt.
        self._hooks, self._interceptors = activity_chain(interceptors)
        self.id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._poll_s = float(poll_interval)
        self._drain_s = parse_duration(drain_timeout, field="drain_timeout")
        self._beat_s = parse_duration(heartbeat_interval, field="heartbeat_interval")
        if self._beat_s <= 0:
            raise ConfigurationError("heartbeat_interval must be positive")
        self._storage_arg = storage
        self._storage: Storage | None = None
        self._owns_storage = False
        self.clock: Clock = clock or SystemClock()
        self.codec: PayloadCodec = codec or DefaultPayloadCodec()
        self._jobs: dict[str, _Job] = {}
        self._shares: dict[str, tuple[int, int]] = {}  # queue -> (rank, live workers)
        self._outbox: list[tuple[_Job, tr.TaskResult, asyncio.Future[bool]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._freed = asyncio.Event()  # an attempt ended
        self._beat_kick = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._unlisten: Unlisten | None = None
        self._notifier: Notifier | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._started_at = 0.0
        self._wake_at: float | None = None  # claim again then: a rate limit lets one start
        self._stopping = False
        self._stopped: asyncio.Event | None = None
        self.drain_requested = False
        self.completed = 0
        self.failed = 0
        self.rejected = 0  # late results refused (the claim was lost)
        self.refused = 0  # tasks handed back: their activity is not registered here
        # Seconds from a task's write to its claim here, latest first out (for benchmarks
        # and health checks; the clocks of the writer and this worker must agree).
        self.dispatch_latencies: deque[float] = deque(maxlen=10_000)

    # --- life cycle -------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._jobs)

    @property
    def draining(self) -> bool:
        return self._stopping or self.drain_requested

    @property
    def storage(self) -> Storage:
        if self._storage is None:
            raise RuntimeError("the worker is not started")
        return self._storage

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Register, listen for new tasks, and start claiming."""
        if isinstance(self._storage_arg, str) or self._storage_arg is None:
            self._storage, self._owns_storage = open_storage(self._storage_arg), True
        else:
            self._storage = self._storage_arg
        self._stopped = asyncio.Event()
        self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="pyweft-worker")
        self._started_at = self.clock.now()
        self._notifier = Notifier(self._storage)
        await self._write_record()
        await self._learn_shares(self._started_at)
        self._unlisten = await self._notifier.listen(tr.TASKS_TOPIC, self._kick.set)
        loop = asyncio.get_running_loop()
        self._loops = [
            loop.create_task(self._claim_loop(), name=f"pyweft-worker-claims-{self.id}"),
            loop.create_task(self._beat_loop(), name=f"pyweft-worker-beats-{self.id}"),
        ]
        log.info(
            "worker %s serves %s with %d slots", self.id, ", ".join(self.queues), self.concurrency
        )

    def request_stop(self) -> None:
        """Begin draining (thread-safe only from the worker's loop; signals use this)."""
        self._stopping = True
        self._kick.set()
        if self._stopped is not None:
            self._stopped.set()

    async def run(self) -> None:
        """Start, serve until SIGTERM or SIGINT (or ``request_stop()``), then drain and stop."""
        await self.start()
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
                installed.append(sig)
        try:
            assert self._stopped is not None
            await self._stopped.wait()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            await self.stop()

    async def stop(self, drain_timeout: Duration | None = None) -> None:
        """Drain: stop claiming, let in-flight attempts finish up to ``drain_timeout``
        (default: the worker's), cancel the rest and hand them back, then unregister."""
        if self._storage is None:
            return
        self._stopping = True
        self._kick.set()
        limit = self._drain_s if drain_timeout is None else parse_duration(drain_timeout)
        claim_loop = self._loops[0] if self._loops else None
        if claim_loop is not None:
            claim_loop.cancel()
            await asyncio.gather(claim_loop, return_exceptions=True)
        running = [j.task for j in self._jobs.values() if j.task is not None]
        log.info(
            "worker %s stopping: no new claims, %d in flight get up to %gs to finish",
            self.id,
            len(running),
            limit,
        )
        if running:
            await self._while_stopping("update its record", self._write_record())
            _, late = await asyncio.wait(running, timeout=limit)
            leftovers = [j for j in list(self._jobs.values()) if j.task in late]
            for job in leftovers:
                job.lost = "the worker is shutting down"
                for actx in job.actx:
                    actx.cancel("the worker is shutting down")
                assert job.task is not None
                job.task.cancel()
            await asyncio.gather(*(j.task for j in leftovers if j.task), return_exceptions=True)
            for job in leftovers:
                async with job.lock:
                    what = f"hand task {job.claimed.task.id} back (its claim expires instead)"
                    if await self._while_stopping(
                        what, claims.hand_back(self.storage, job.claimed)
                    ):
                        log.info(
                            "worker %s handed task %s back (drain timeout)",
                            self.id,
                            job.claimed.task.id,
                        )
            if leftovers and self._notifier is not None:
                await self._while_stopping("ring", self._notifier.ring(tr.TASKS_TOPIC))
        for task in self._loops[1:]:
            task.cancel()
        await asyncio.gather(*self._loops[1:], return_exceptions=True)
        self._loops = []
        unlisten, self._unlisten = self._unlisten, None
        if unlisten is not None:
            await unlisten()
        unregister = self.storage.batch([Delete(key=tr.worker_key(self.id))])
        await self._while_stopping("unregister (its record expires instead)", unregister)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self._owns_storage:
            await self._while_stopping("close its store", self.storage.close())
        self._storage = None
        log.info("worker %s stopped (%d done, %d failed)", self.id, self.completed, self.failed)
        if self._stopped is not None:
            self._stopped.set()

    async def _while_stopping(self, what: str, step: Awaitable[T]) -> T | None:
        """Await one of ``stop``'s writes; a failure is logged, not raised, so the worker
        still cancels what runs and stops (what the write would have said, an expiry says)."""
        try:
            return await step
        except Exception as exc:
            log.warning("worker %s: stopping, could not %s: %s", self.id, what, exc)
            return None

    # --- claiming ---------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        # Tasks may be waiting: at the start, after a ring (a task was written), a poll
        # interval without one, or a claim that filled every free slot. Only then does a
        # slot freed by an ending attempt start a claim: with the queue found empty, an
        # ending attempt would only pay for a claim that finds nothing.
        waiting = True
        backlog = False  # the last claim filled every free slot
        loop = asyncio.get_running_loop()
        empty_at = -_BUSY_S  # when a claim prompted by a ring last found nothing (loop time)
        rung = False  # this claim follows a ring (not the start, a poll or a freed slot)
        while not self._stopping:
            free = self.concurrency - self.in_flight
            if waiting and free > 0 and not self.draining:
                if backlog:
                    await self._gather_slots()
                elif loop.time() - empty_at < _BUSY_S:
                    await asyncio.sleep(_AFTER_EMPTY_S)
                free = self.concurrency - self.in_flight
                try:
                    got = await self.claim_now()
                except Exception:
                    log.exception("worker %s: claiming failed; trying again", self.id)
                else:
                    if got == 0 and rung:
                        empty_at = loop.time()
                    waiting = backlog = got >= free
                    if waiting and self.in_flight < self.concurrency:
                        continue  # there may be more ready
            self._freed.clear()
            wake = [self._kick.wait(), self._freed.wait()] if waiting else [self._kick.wait()]
            ready = [asyncio.ensure_future(w) for w in wake]
            timeout = self._poll_s
            if self._wake_at is not None:  # a rate limit's window frees a start sooner
                timeout = min(timeout, max(0.001, self._wake_at - self.clock.now()))
            try:
                done, _ = await asyncio.wait(ready, timeout=timeout, return_when="FIRST_COMPLETED")
            finally:
                for fut in ready:
                    fut.cancel()
            rung = bool(done) and ready[0] in done
            if not done or rung:  # a ring, a stop, a drain change, or a poll
                self._kick.clear()
                waiting = True

    async def _gather_slots(self) -> None:
        """With tasks waiting and few slots free, let a few more attempts end first (for
        at most ``_GATHER_S``), so that one claim, one round trip, takes several tasks
        instead of each ending attempt costing a claim of its own."""
        want = max(1, self.concurrency // 4)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_GATHER_S):
                while self.concurrency - self.in_flight < want and not self.draining:
                    self._freed.clear()
                    await self._freed.wait()

    async def claim_now(self) -> int:
        """Claim what fits in the free slots and start it. Returns how many."""
        started = 0
        wake: list[float] = []  # when a rate limit that held tasks back lets one start
        self._wake_at = None
        for queue in self.queues:
            free = self.concurrency - self.in_flight
            if free <= 0 or self.draining:
                break
            now = self.clock.now()
            share = self._shares.get(queue, (0, 1))
            got = await claims.claim(self.storage, queue, self.id, now, free, share, wake)
            for c in got:
                self.dispatch_latencies.append(now - c.task.created_at)
                if self._hooks:
                    flow.dispatched(self._hooks, "activity", queue, now - c.task.created_at)
                job = _Job(claimed=c)
                self._jobs[c.task.id] = job
                job.task = asyncio.get_running_loop().create_task(self._run(job))
                started += 1
        if wake:
            self._wake_at = min(wake)
        return started

    async def _run(self, job: _Job) -> None:
        task = job.claimed.task
        try:
            act = self._activities.get(task.activity)
            if act is None:
                await self._refuse(job)
                return
            assert self._executor is not None
            # The attempt started when it was claimed (the time a rate limit counts).
            result = await run_task(
                task,
                act,
                self.codec,
                self._executor,
                task.claimed_at,
                self.id,
                job.actx,
                self._interceptors,
            )
            result = msgspec.structs.replace(result, at=self.clock.now())
            async with job.lock:
                if job.lost is not None:
                    self._rejected(job, job.lost)
                    return
                job.done = True
                if not await self._store(job, result):
                    self._rejected(job, "its claim was lost")
                    return
            if result.ok:
                self.completed += 1
            else:
                self.failed += 1
        except asyncio.CancelledError:
            if job.lost is None:
                raise
        except Exception:
            log.exception("worker %s: task %s could not be finished", self.id, task.id)
        finally:
            self._jobs.pop(task.id, None)
            self._freed.set()  # a slot is free: claimed into when tasks are waiting

    async def _store(self, job: _Job, result: tr.TaskResult) -> bool:
        """Store an outcome; outcomes finished meanwhile share one batch."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._outbox.append((job, result, fut))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        return await fut

    async def _flush(self) -> None:
        while self._outbox:
            batch, self._outbox = self._outbox, []
            rings = tr.results_rings(any(job.claimed.task.slot for job, _, _ in batch))
            write = None
            if self._notifier is not None:  # the rings go with the write where they can
                write = functools.partial(self._notifier.write, channels=rings)
            try:
                oks = await claims.finish_many(
                    self.storage, [(job.claimed, result) for job, result, _ in batch], write
                )
            except Exception as exc:
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, _, fut), ok in zip(batch, oks, strict=True):
                if not fut.done():
                    fut.set_result(ok)

    async def _refuse(self, job: _Job) -> None:
        task = job.claimed.task
        known = ", ".join(sorted(self._activities)) or "none"
        why = (
            f"worker {self.id!r} has no activity {task.activity!r} (it has: {known}); "
            "register it with Worker(activities=[...]) on the workers of queue "
            f"{task.queue!r}"
        )
        log.error("task %s handed back: %s", task.id, why)
        async with job.lock:
            job.done = True
            await claims.hand_back(self.storage, job.claimed, refuse=True, error=why)
        self.refused += 1
        assert self._notifier is not None
        self._notifier.ring_soon(tr.TASKS_TOPIC)

    def _rejected(self, job: _Job, why: str) -> None:
        self.rejected += 1
        log.warning(
            "worker %s: the result of task %s (activity %s, workflow %s step %d attempt %d) "
            "was refused: %s",
            self.id,
            job.claimed.task.id,
            job.claimed.task.activity,
            job.claimed.task.workflow_id,
            job.claimed.task.step,
            job.claimed.task.attempt,
            why,
        )

    # --- heartbeats ---------------------------------------------------------------------

    def _interval(self) -> float:
        vis = [j.claimed.task.visibility_s for j in self._jobs.values()]
        return min([self._beat_s, *(v / 3 for v in vis)])

    async def _beat_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval()):
                    await self._beat_kick.wait()
            self._beat_kick.clear()
            try:
                await self.heartbeat()
            except Exception:
                log.exception("worker %s: heartbeat failed; trying again", self.id)

    async def heartbeat(self) -> None:
        """One heartbeat: keep claims, notice lost ones, read drain requests, record
        liveness, and fail the attempts of workers whose claims expired."""
        storage = self.storage
        now = self.clock.now()
        jobs = [j for j in self._jobs.values() if not j.done]
        reads = [Get(key=tr.task_key(j.claimed.task.id)) for j in jobs]
        found = await read_many(storage, [*reads, Get(key=tr.drain_key(self.id))])
        was = self.drain_requested
        self.drain_requested = found[-1] is not None
        if was != self.drain_requested:
            log.info(
                "worker %s: %s",
                self.id,
                f"drain requested: no new claims, {len(jobs)} in flight finish"
                if self.drain_requested
                else "resumed: claiming again",
            )
        if was and not self.drain_requested:
            self._kick.set()
        for job, raw in zip(jobs, found[:-1], strict=True):
            async with job.lock:
                if job.done:
                    continue
                if raw != job.claimed.raw:
                    self._lose(
                        job, "the run no longer waits for it (cancelled) or its claim expired"
                    )
                    continue
                task = job.claimed.task
                due = task.claim_until - now < task.visibility_s * 2 / 3
                if due and await claims.extend(storage, [job.claimed], now):
                    self._lose(job, "its claim was taken while it was being extended")
        await self._write_record()
        await self._learn_shares(now)
        if flow.wants(self._hooks, "observe_queue_depth"):
            for queue in self.queues:
                depth = await flow.count(storage, [tr.ready_prefix(queue)])
                flow.queue_depth(self._hooks, "activity", queue, depth)
        if await claims.reap(storage, now) and self._notifier is not None:
            self._notifier.ring_soon(tr.RESULTS_TOPIC)

    async def _learn_shares(self, now: float) -> None:
        """Which live workers serve each of this worker's queues (see ``claims.claim``)."""
        serving: dict[str, list[str]] = {q: [] for q in self.queues}
        for key, raw in await self.storage.scan(tr.WORKER_PREFIX):
            rec = tr.decode_worker(raw, key=key)
            if rec.expires_at < now - _FORGET_GONE_S:  # killed long ago: drop its record
                await self.storage.conditional_batch(
                    [Expect(key=key, value=raw)],
                    [Delete(key=key), Delete(key=tr.drain_key(rec.id))],
                )
                continue
            if rec.expires_at < now or (rec.draining and rec.id != self.id):
                continue
            for q in rec.queues:
                if q in serving:
                    serving[q].append(rec.id)
        self._shares = {
            q: (sorted(ids).index(self.id), len(ids))
            for q, ids in serving.items()
            if self.id in ids
        }

    def _lose(self, job: _Job, why: str) -> None:
        job.lost = why
        job.done = True
        for actx in job.actx:
            actx.cancel(why)
        if job.task is not None:
            job.task.cancel()
        log.info("worker %s: task %s cancelled: %s", self.id, job.claimed.task.id, why)

    async def _write_record(self) -> None:
        now = self.clock.now()
        rec = tr.WorkerRecord(
            id=self.id,
            queues=self.queues,
            activities=tuple(sorted(self._activities)),
            concurrency=self.concurrency,
            in_flight=self.in_flight,
            started_at=self._started_at,
            heartbeat_at=now,
            expires_at=now + 3 * self._beat_s,
            host=socket.gethostname(),
            pid=os.getpid(),
            draining=self.draining,
            completed=self.completed,
            failed=self.failed,
        )
        await self.storage.batch([Put(key=tr.worker_key(self.id), value=tr.encode(rec))])
