"""``TaskBroker``: hold task claims in the store on behalf of workers that are elsewhere.

A server that relays tasks to workers over the network (``pyweft.server``'s task
streams) claims the same task records a store :class:`~pyweft.Worker` claims, with
the same conditional writes (see :mod:`.claims`), in the name of the remote worker.
So a worker over the network and a worker on the store are interchangeable: either
may take any attempt, a late result of either is refused, and a lost worker's
attempts are failed and retried by the step's retry policy.

Each claim is fenced twice: in the store by the exact record last written (as for
every worker), and towards the remote worker by an *attempt token*, a random string
handed out with the task that its result must echo.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
from dataclasses import dataclass
from typing import Any

from pyweft.clock import Clock
from pyweft.codec import PayloadCodec
from pyweft.engine.replay.records import ErrorInfo
from pyweft.engine.tasks import claims
from pyweft.engine.tasks import records as tr
from pyweft.engine.tasks.claims import Claimed
from pyweft.engine.tasks.doorbell import Notifier, Unlisten
from pyweft.storage.base import Delete, Get, Put, Storage, read_many

Task = tr.Task


@dataclass(slots=True, eq=False)
class Held:
    """An attempt claimed for a remote worker: the claim, and the token its result echoes."""

    claimed: Claimed
    token: str

    @property
    def task(self) -> tr.Task:
        return self.claimed.task

    @property
    def id(self) -> str:
        return self.claimed.task.id


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerLiveness:
    """What a remote worker's liveness record says (``engine.workers()`` lists it)."""

    worker_id: str
    queues: tuple[str, ...]
    activities: tuple[str, ...]
    concurrency: int
    in_flight: int
    started_at: float
    expires_in_s: float
    host: str
    draining: bool
    completed: int
    failed: int


class TaskBroker:
    """Claims, keeps and ends task claims for workers that do not reach the store."""

    def __init__(self, storage: Storage, clock: Clock, codec: PayloadCodec) -> None:
        self.storage = storage
        self.clock = clock
        self.codec = codec
        self._notifier = Notifier(storage)

    async def listen_for_tasks(self, callback: Any) -> Unlisten | None:
        """Call ``callback`` when a task may have been queued (best effort; poll too)."""
        return await self._notifier.listen(tr.TASKS_TOPIC, callback)

    async def claim(
        self, queue: str, worker_id: str, limit: int, share: tuple[int, int] = (0, 1)
    ) -> list[Held]:
        """Claim up to ``limit`` ready attempts of ``queue`` for ``worker_id``."""
        got = await claims.claim(self.storage, queue, worker_id, self.clock.now(), limit, share)
        return [Held(claimed=c, token=secrets.token_urlsafe(18)) for c in got]

    def decode_input(self, held: Held) -> list[Any]:
        """The attempt's arguments as plain values (raises ``PayloadError``)."""
        values = self.codec.decode(held.task.args)
        return list(values) if isinstance(values, list | tuple) else [values]

    async def still_held(self, held: list[Held]) -> list[bool]:
        """Whether each claim is still exactly as this broker last wrote it (false: the run
        withdrew the attempt, e.g. it was cancelled, or the claim expired)."""
        found = await read_many(self.storage, [Get(key=tr.task_key(h.id)) for h in held])
        return [raw == h.claimed.raw for h, raw in zip(held, found, strict=True)]

    async def extend_due(self, held: list[Held]) -> list[Held]:
        """Push on the claims that have used a third of their visibility timeout; returns
        the ones that were lost meanwhile."""
        now = self.clock.now()
        due = [h for h in held if h.task.claim_until - now < h.task.visibility_s * 2 / 3]
        if not due:
            return []
        lost = {id(c) for c in await claims.extend(self.storage, [h.claimed for h in due], now)}
        return [h for h in due if id(h.claimed) in lost]

    def completed(self, held: Held, value: Any, worker_id: str) -> tr.TaskResult:
        """The outcome of an attempt that returned ``value`` (raises ``PayloadError`` when
        the codec cannot encode it)."""
        payload = self.codec.encode(value)
        return tr.TaskResult(
            task_id=held.id, ok=True, at=self.clock.now(), worker=worker_id, value=payload
        )

    def failed(
        self,
        held: Held,
        worker_id: str,
        *,
        error_type: str,
        message: str,
        non_retryable: bool = False,
        timeout_kind: str | None = None,
        traceback: str | None = None,
    ) -> tr.TaskResult:
        """The outcome of a failed attempt; the step's retry policy decides what next."""
        return tr.TaskResult(
            task_id=held.id,
            ok=False,
            at=self.clock.now(),
            worker=worker_id,
            error=ErrorInfo(type=error_type, message=message, traceback=traceback),
            non_retryable=non_retryable,
            timeout_kind=timeout_kind,
        )

    async def finish(self, done: list[tuple[Held, tr.TaskResult]]) -> list[bool]:
        """Store outcomes, each fenced by its claim: one batch when every claim holds, else
        one each. ``False`` for an outcome whose claim was lost: nothing written for it."""
        if not done:
            return []
        rings = tr.results_rings(any(h.task.slot is not None for h, _ in done))
        return await claims.finish_many(
            self.storage,
            [(h.claimed, r) for h, r in done],
            functools.partial(self._notifier.write, channels=rings),
        )

    async def abandon(self, held: Held, why: str) -> bool:
        """Fail an attempt whose worker is gone, as an expired claim fails (see
        :func:`.claims.reap`): ``ActivityTimeoutError(kind="visibility")``."""
        task = held.task
        result = self.failed(
            held,
            task.claimed_by or "",
            error_type="ActivityTimeoutError",
            message=f"activity {task.activity!r} (attempt {task.attempt}): {why}",
            timeout_kind="visibility",
        )
        (ok,) = await self.finish([(held, result)])
        return ok

    async def hand_back(
        self, held: Held, *, refuse: bool = False, error: str | None = None
    ) -> bool:
        """Put the attempt back in line as the same attempt (``refuse``: this worker does
        not take it again; ``error`` is kept in the task as ``last_error``)."""
        ok = await claims.hand_back(self.storage, held.claimed, refuse=refuse, error=error)
        if ok:
            self._notifier.ring_soon(tr.TASKS_TOPIC)
        return ok

    async def reap(self) -> int:
        """Fail the attempts of any worker whose claims expired (see :func:`.claims.reap`)."""
        n = await claims.reap(self.storage, self.clock.now())
        if n:
            self._notifier.ring_soon(tr.RESULTS_TOPIC)
        return n

    # --- liveness records -------------------------------------------------------------

    async def live_worker_ids(self) -> set[str]:
        """The ids of workers (store or remote) whose liveness record has not expired."""
        now = self.clock.now()
        out = set()
        for key, raw in await self.storage.scan(tr.WORKER_PREFIX):
            rec = tr.decode_worker(raw, key=key)
            if rec.expires_at >= now:
                out.add(rec.id)
        return out

    async def shares(self, worker_id: str, queues: tuple[str, ...]) -> dict[str, tuple[int, int]]:
        """``(rank, count)`` of ``worker_id`` among the live workers of each queue (see
        :func:`.claims.claim`)."""
        now = self.clock.now()
        serving: dict[str, list[str]] = {q: [] for q in queues}
        for key, raw in await self.storage.scan(tr.WORKER_PREFIX):
            rec = tr.decode_worker(raw, key=key)
            if rec.expires_at < now or (rec.draining and rec.id != worker_id):
                continue
            for q in rec.queues:
                if q in serving:
                    serving[q].append(rec.id)
        return {
            q: (sorted(ids).index(worker_id), len(ids))
            for q, ids in serving.items()
            if worker_id in ids
        }

    async def beat(self, live: WorkerLiveness) -> bool:
        """Write the worker's liveness record; returns whether an operator asked it to
        drain (``engine.drain_worker``)."""
        now = self.clock.now()
        rec = tr.WorkerRecord(
            id=live.worker_id,
            queues=live.queues,
            activities=live.activities,
            concurrency=live.concurrency,
            in_flight=live.in_flight,
            started_at=live.started_at,
            heartbeat_at=now,
            expires_at=now + live.expires_in_s,
            host=live.host,
            pid=os.getpid(),
            draining=live.draining,
            completed=live.completed,
            failed=live.failed,
        )
        await self.storage.batch([Put(key=tr.worker_key(live.worker_id), value=tr.encode(rec))])
        return await self.storage.get(tr.drain_key(live.worker_id)) is not None

    async def forget(self, worker_id: str) -> None:
        """Remove a worker's liveness record (it left cleanly)."""
        await self.storage.batch([Delete(key=tr.worker_key(worker_id))])

    @staticmethod
    def host_label(peer: str | None) -> str:
        """How a remote worker's host reads in ``engine.workers()``."""
        return f"{peer or 'unknown'} via {socket.gethostname()}"
