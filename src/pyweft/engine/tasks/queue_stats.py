"""The operator's view of activity task queues: what waits, what runs, who serves it.

Read from the task records themselves (``tk:t:``: one per outstanding attempt, queued
or claimed), the workers' liveness records and each queue's limits, so it agrees with
what workers claim. It reads every outstanding task: meant for operators and
dashboards, not for a hot path.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyweft.engine.tasks import limits
from pyweft.engine.tasks import records as tr
from pyweft.engine.tasks.limits import QueueLimits
from pyweft.engine.tasks.workers import list_workers
from pyweft.storage.base import Get, Storage, read_many


@dataclass(frozen=True, kw_only=True, slots=True)
class ActivityQueueInfo:
    """One activity task queue now (``engine.activity_queues()``)."""

    name: str
    waiting: int  # tasks written and not claimed
    in_flight: int  # tasks a worker holds
    oldest_waiting_s: float | None  # how long the oldest waiting task has waited
    workers: int  # live workers serving the queue and claiming
    draining_workers: int  # live workers serving it that were asked to drain
    slots: int  # the live workers' concurrency, summed
    limits: QueueLimits | None


@dataclass(slots=True)
class _Tally:
    waiting: int = 0
    in_flight: int = 0
    oldest: float | None = None  # created_at of the oldest waiting task
    workers: int = 0
    draining: int = 0
    slots: int = 0


async def activity_queues(
    storage: Storage, now: float, queue: str | None = None
) -> list[ActivityQueueInfo]:
    """Every queue with outstanding tasks or live workers (or just ``queue``), by name."""
    tallies: dict[str, _Tally] = {} if queue is None else {queue: _Tally()}
    for key, raw in await storage.scan(tr.TASK_PREFIX):
        task = tr.decode_task(raw, key=key)
        if queue is not None and task.queue != queue:
            continue
        tally = tallies.setdefault(task.queue, _Tally())
        if task.claimed_by is None:
            tally.waiting += 1
            if tally.oldest is None or task.created_at < tally.oldest:
                tally.oldest = task.created_at
        else:
            tally.in_flight += 1
    for worker in await list_workers(storage, now, include_gone=False):
        for name in worker.queues:
            if queue is not None and name != queue:
                continue
            tally = tallies.setdefault(name, _Tally())
            tally.slots += worker.concurrency
            if worker.status == "active":
                tally.workers += 1
            else:
                tally.draining += 1
    names = sorted(tallies)
    configs = await read_many(storage, [Get(key=limits.config_key(n)) for n in names])
    return [
        ActivityQueueInfo(
            name=name,
            waiting=tallies[name].waiting,
            in_flight=tallies[name].in_flight,
            oldest_waiting_s=None if (t := tallies[name].oldest) is None else max(0.0, now - t),
            workers=tallies[name].workers,
            draining_workers=tallies[name].draining,
            slots=tallies[name].slots,
            limits=limits.decode(raw) if isinstance(raw, bytes) else None,
        )
        for name, raw in zip(names, configs, strict=True)
    ]
