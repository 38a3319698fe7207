"""Claiming tasks, keeping claims, and ending them: the store side of a worker.

Every function here is one or a few conditional batches, each conditioned on
the exact task record its caller read or last wrote, so two workers never both
hold a task and a worker that lost its claim (expired, or the run cancelled
the step) cannot write anything for it. See :mod:`.records` for the layout.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import msgspec

from pyweft.engine.replay.records import ErrorInfo
from pyweft.engine.tasks import records as tr
from pyweft.storage.base import Delete, Expect, Get, Op, Put, Storage, read_many

log = logging.getLogger("pyweft.tasks")


@dataclass(slots=True)
class Claimed:
    """A task this worker holds: the record as it last wrote it, and its lease entry."""

    task: tr.Task
    raw: bytes

    @property
    def lease(self) -> str:
        return tr.lease_key(self.task.claim_until, self.task.id)


async def claim(
    storage: Storage, queue: str, worker_id: str, now: float, limit: int
) -> list[Claimed]:
    """Claim up to ``limit`` of the oldest ready tasks of ``queue``.

    A ready entry holds the task record as it was queued, so one scan finds both;
    the claim is conditioned on the record still being exactly that.
    """
    if limit <= 0:
        return []
    index = await storage.scan(tr.ready_prefix(queue), limit=limit * 2 + 8)
    picks: list[tuple[str, tr.Task, bytes]] = []
    for key, raw in index:
        task = tr.decode_task(raw, key=key)
        if worker_id in task.refused_by:
            continue
        picks.append((key, task, raw))
        if len(picks) >= limit:
            break
    got = await asyncio.gather(*(_claim_one(storage, k, t, r, worker_id, now) for k, t, r in picks))
    return [c for c in got if c is not None]


async def _claim_one(
    storage: Storage, ready: str, task: tr.Task, raw: bytes, worker_id: str, now: float
) -> Claimed | None:
    held = msgspec.structs.replace(
        task, claimed_by=worker_id, claimed_at=now, claim_until=now + task.visibility_s
    )
    new = tr.encode(held)
    key = tr.task_key(task.id)
    ops: list[Op] = [
        Delete(key=ready),
        Put(key=key, value=new),
        Put(key=tr.lease_key(held.claim_until, task.id), value=b"1"),
    ]
    if await storage.conditional_batch([Expect(key=key, value=raw)], ops):
        return Claimed(task=held, raw=new)
    if await storage.get(key) is None:  # withdrawn with its step (the run was cancelled)
        await storage.conditional_batch([Expect(key=key, value=None)], [Delete(key=ready)])
    return None  # or another worker was faster


async def extend(storage: Storage, held: list[Claimed], now: float) -> list[Claimed]:
    """Push the claims on by their visibility timeout; returns the ones that were lost."""
    ok = await asyncio.gather(*(_extend_one(storage, c, now) for c in held))
    return [c for c, kept in zip(held, ok, strict=True) if not kept]


async def _extend_one(storage: Storage, c: Claimed, now: float) -> bool:
    task = msgspec.structs.replace(c.task, claim_until=now + c.task.visibility_s)
    new = tr.encode(task)
    ops: list[Op] = [
        Put(key=tr.task_key(task.id), value=new),
        Put(key=tr.lease_key(task.claim_until, task.id), value=b"1"),
    ]
    if c.lease != tr.lease_key(task.claim_until, task.id):
        ops.append(Delete(key=c.lease))
    if not await storage.conditional_batch([Expect(key=tr.task_key(task.id), value=c.raw)], ops):
        return False
    c.task, c.raw = task, new
    return True


async def finish(storage: Storage, c: Claimed, result: tr.TaskResult) -> bool:
    """Store the outcome of a held task. ``False``: the claim was lost, nothing written."""
    ops: list[Op] = [
        Delete(key=tr.task_key(c.task.id)),
        Delete(key=c.lease),
        Put(key=tr.result_key(c.task.id), value=tr.encode(result)),
    ]
    return await storage.conditional_batch([Expect(key=tr.task_key(c.task.id), value=c.raw)], ops)


async def hand_back(
    storage: Storage, c: Claimed, *, refuse: bool = False, error: str | None = None
) -> bool:
    """Put a held task back in line (its original place), for another worker."""
    task = msgspec.structs.replace(
        c.task,
        claimed_by=None,
        claimed_at=0.0,
        claim_until=0.0,
        refused_by=(*c.task.refused_by, c.task.claimed_by or "") if refuse else c.task.refused_by,
        last_error=error if error is not None else c.task.last_error,
    )
    raw = tr.encode(task)
    ops: list[Op] = [
        Put(key=tr.task_key(task.id), value=raw),
        Put(key=task.ready_key, value=raw),  # the ready entry carries the record
        Delete(key=c.lease),
    ]
    return await storage.conditional_batch([Expect(key=tr.task_key(task.id), value=c.raw)], ops)


async def reap(storage: Storage, now: float, limit: int = 200) -> int:
    """Fail the attempts whose claims expired (their worker stopped heartbeating).

    The step's retry policy then decides about a next attempt. Returns how many.
    """
    expired = await storage.scan(tr.LEASE_PREFIX, end=tr.lease_bound(now), limit=limit)
    if not expired:
        return 0
    ids = [tr.id_of_lease(key) for key, _ in expired]
    found = await read_many(storage, [Get(key=tr.task_key(tid)) for tid in ids])
    reaped = 0
    stale: list[Op] = []
    for (key, _), tid, raw in zip(expired, ids, found, strict=True):
        task = None if not isinstance(raw, bytes) else tr.decode_task(raw, key=tr.task_key(tid))
        if task is None or task.claimed_by is None or key != tr.lease_key(task.claim_until, tid):
            stale.append(Delete(key=key))  # finished, handed back, or extended since
            continue
        result = tr.TaskResult(
            task_id=tid,
            ok=False,
            at=now,
            worker=task.claimed_by,
            error=ErrorInfo(
                type="ActivityTimeoutError",
                message=(
                    f"activity {task.activity!r} (attempt {task.attempt}) was claimed by worker "
                    f"{task.claimed_by!r}, which stopped heartbeating: its claim expired after "
                    f"the visibility timeout of {task.visibility_s:g}s"
                ),
                code="ActivityTimeoutError",
            ),
            timeout_kind="visibility",
        )
        ops: list[Op] = [
            Delete(key=tr.task_key(tid)),
            Delete(key=key),
            Put(key=tr.result_key(tid), value=tr.encode(result)),
        ]
        assert isinstance(raw, bytes)
        if await storage.conditional_batch([Expect(key=tr.task_key(tid), value=raw)], ops):
            log.warning("%s", result.error.message if result.error else "claim expired")
            reaped += 1
    if stale:
        await storage.batch(stale)
    return reaped
