"""Claiming tasks, keeping claims, and ending them: the store side of a worker.

Every function here is one or a few conditional batches, each conditioned on
the exact task record its caller read or last wrote, so two workers never both
hold a task and a worker that lost its claim (expired, or the run cancelled
the step) cannot write anything for it. See :mod:`.records` for the layout.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import cast

import msgspec

from pyweft.engine.replay.records import ErrorInfo
from pyweft.engine.tasks import limits
from pyweft.engine.tasks import records as tr
from pyweft.engine.tasks.limits import QueueLimits
from pyweft.storage.base import (
    Delete,
    Expect,
    Get,
    Op,
    Put,
    Storage,
    TakingStorage,
    read_many,
)

log = logging.getLogger("pyweft.tasks")

_STALE_ENTRY_S = 1.0

Batch = tuple[list[Expect], list[Op]]


@dataclass(slots=True)
class Claimed:
    """A task this worker holds: the record as it last wrote it, and its lease entry."""

    task: tr.Task
    raw: bytes

    @property
    def lease(self) -> str:
        return tr.lease_key(self.task.claim_until, self.task.id)


async def claim(
    storage: Storage,
    queue: str,
    worker_id: str,
    now: float,
    limit: int,
    share: tuple[int, int] = (0, 1),
    wake: list[float] | None = None,
) -> list[Claimed]:
    """Claim up to ``limit`` of the oldest ready tasks of ``queue``.

    A ready entry holds the task record as it was queued, so one scan finds both;
    the claim is conditioned on the record still being exactly that. The queue's
    limits (see :mod:`.limits`) head the same range, so they are read with it. ``share`` is
    ``(rank, count)`` among the live workers of the queue: each first tries every
    ``count``-th task from its rank, so workers racing for the same few tasks
    mostly do not collide (a collision costs a failed write, not a wrong claim).
    On a store that has ``take`` (PostgreSQL) the claim goes through it instead and
    never collides; ``share`` is not needed there. When the queue's rate limit held tasks
    back, the time its window next lets one start is appended to ``wake``.
    """
    if limit <= 0:
        return []
    if getattr(storage, "take", None) is not None:
        taking = cast("TakingStorage", storage)
        return await _claim_taking(taking, queue, worker_id, now, limit, wake)
    index = await storage.scan(tr.ready_prefix(queue), limit=limit * 2 + 9)
    queue_limits: QueueLimits | None = None
    if index and index[0][0] == limits.config_key(queue):
        queue_limits = limits.decode(index[0][1])
        index = index[1:]
    picks: list[tuple[str, tr.Task, bytes]] = []
    for key, raw in index:
        task = tr.decode_task(raw, key=key)
        if worker_id not in task.refused_by:
            picks.append((key, task, raw))
    rank, count = share
    if count > 1 and len(picks) > 1:
        mine = picks[rank % count :: count]
        picks = mine or picks[:1]
    if len(picks) > limit:
        # Workers racing for the same oldest tasks would mostly collide: each takes a
        # random share of the oldest ones (the oldest half of ``limit`` always among them).
        cut = max(1, limit // 2)
        head, rest = picks[:cut], picks[cut:]
        picks = head + random.sample(rest, limit - len(head))
    if queue_limits is not None:
        return await _claim_limited(storage, picks[:limit], worker_id, now, queue_limits, wake)
    if len(picks) > 1:  # all at once, when nobody took any of them meanwhile
        held = [_claimed(t, worker_id, now) for _, t, _ in picks]
        conds = [Expect(key=tr.task_key(t.id), value=r) for _, t, r in picks]
        ops = [op for (k, _, _), h in zip(picks, held, strict=True) for op in _claim_ops(k, h)]
        if await storage.conditional_batch(conds, ops):
            return held
    got = await asyncio.gather(*(_claim_one(storage, k, t, r, worker_id, now) for k, t, r in picks))
    return [c for c in got if c is not None]


async def _claim_taking(
    storage: TakingStorage,
    queue: str,
    worker_id: str,
    now: float,
    limit: int,
    wake: list[float] | None,
) -> list[Claimed]:
    """Claim through the store's ``take`` (PostgreSQL: ``FOR UPDATE SKIP LOCKED``): the
    oldest ready entries no other worker is claiming at this moment, claimed in the same
    trip, so racing workers split the line instead of colliding. The queue's limits are
    peeked at in the same trip, not taken (every worker must see them); a limited queue
    is claimed with its slots as before."""
    held: list[Claimed] = []
    limited: list[tuple[str, tr.Task, bytes]] = []
    config = limits.config_key(queue)

    def plan(pairs: list[tuple[str, bytes]], peeked: list[bytes | None]) -> list[Batch]:
        ready = []
        for key, raw in pairs:
            task = tr.decode_task(raw, key=key)
            if worker_id not in task.refused_by:
                ready.append((key, task, raw))
        if peeked[0] is not None:
            limited.extend(ready[:limit])  # claimed below with the queue's slots
            return []
        batches: list[Batch] = []
        for key, task, raw in ready[:limit]:
            c = _claimed(task, worker_id, now)
            held.append(c)
            batches.append(([Expect(key=tr.task_key(task.id), value=raw)], _claim_ops(key, c)))
        return batches

    # From the first time stamp: past the limits entry, which sorts first in the range.
    prefix = tr.ready_prefix(queue)
    oks = await storage.take(prefix, start=prefix + "0", limit=limit + 8, plan=plan, peek=[config])
    if limited:
        raw_limits = await storage.get(config)
        if raw_limits is None:  # removed meanwhile: claim them the plain way next look
            return []
        queue_limits = limits.decode(raw_limits)
        return await _claim_limited(storage, limited, worker_id, now, queue_limits, wake)
    got = [c for c, ok in zip(held, oks, strict=True) if ok]
    if len(got) < len(held):
        lost = [c for c, ok in zip(held, oks, strict=True) if not ok]
        await asyncio.gather(*(_tidy(storage, c.task, now) for c in lost))
    return got


async def _tidy(storage: Storage, task: tr.Task, now: float) -> None:
    """An entry that stays in line this long while its claim fails may be the leftover of
    a task withdrawn with its step (the run was cancelled after a restart): remove it."""
    key = tr.task_key(task.id)
    if now - task.created_at > _STALE_ENTRY_S and await storage.get(key) is None:
        await storage.conditional_batch([Expect(key=key, value=None)], [Delete(key=task.ready_key)])


async def _claim_limited(
    storage: Storage,
    picks: list[tuple[str, tr.Task, bytes]],
    worker_id: str,
    now: float,
    queue_limits: QueueLimits,
    wake: list[float] | None = None,
) -> list[Claimed]:
    """Claim with the queue's slots taken in the same batch: all of them, or (when another
    worker took a slot or a task meanwhile) one, or none until the next look."""
    for size in (len(picks), 1):
        if not picks:
            return []
        wanted = min(size, len(picks))
        granted = await limits.grants(storage, queue_limits, now, wanted, wake)
        if not granted:
            return []
        conds: list[Expect] = []
        ops: list[Op] = []
        held: list[Claimed] = []
        for (ready, task, raw), grant in zip(picks, granted, strict=False):
            c = _claimed(task, worker_id, now, grant.slot)
            held.append(c)
            conds += [Expect(key=tr.task_key(task.id), value=raw), *grant.conds]
            ops += [*_claim_ops(ready, c), *grant.ops]
            if grant.slot is not None:
                ops.append(Put(key=grant.slot, value=task.id.encode()))
        if await storage.conditional_batch(conds, ops):
            return held
    return []


def _claimed(task: tr.Task, worker_id: str, now: float, slot: str | None = None) -> Claimed:
    held = msgspec.structs.replace(
        task,
        claimed_by=worker_id,
        claimed_at=now,
        claim_until=now + task.visibility_s,
        slot=slot,
    )
    return Claimed(task=held, raw=tr.encode(held))


def _claim_ops(ready: str, c: Claimed) -> list[Op]:
    return [
        Delete(key=ready),
        Put(key=tr.task_key(c.task.id), value=c.raw),
        Put(key=c.lease, value=b"1"),
    ]


async def _claim_one(
    storage: Storage, ready: str, task: tr.Task, raw: bytes, worker_id: str, now: float
) -> Claimed | None:
    held = _claimed(task, worker_id, now)
    key = tr.task_key(task.id)
    if await storage.conditional_batch([Expect(key=key, value=raw)], _claim_ops(ready, held)):
        return held
    await _tidy(storage, task, now)  # usually another worker was faster
    return None


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


Write = Callable[[Sequence[Expect], Sequence[Op]], Awaitable[bool]]
"""A conditional batch write (``storage.conditional_batch``, or one that also rings)."""


async def finish_many(
    storage: Storage, done: list[tuple[Claimed, tr.TaskResult]], write: Write | None = None
) -> list[bool]:
    """Store several outcomes: one batch when every claim still holds (the usual case),
    else one each, so a lost claim refuses only its own result. ``write`` (default:
    ``storage.conditional_batch``) applies each batch, e.g. with the results ring."""
    write = write or storage.conditional_batch
    if len(done) > 1:
        conds = [Expect(key=tr.task_key(c.task.id), value=c.raw) for c, _ in done]
        ops = [op for c, result in done for op in _finish_ops(c, result)]
        if await write(conds, ops):
            return [True] * len(done)
    return list(await asyncio.gather(*(finish(storage, c, r, write) for c, r in done)))


def _finish_ops(c: Claimed, result: tr.TaskResult) -> list[Op]:
    return [
        Delete(key=tr.task_key(c.task.id)),
        Delete(key=c.lease),
        Put(key=tr.result_key(c.task.id), value=tr.encode(result)),
        *limits.slot_ops(c.task),
    ]


async def finish(
    storage: Storage, c: Claimed, result: tr.TaskResult, write: Write | None = None
) -> bool:
    """Store the outcome of a held task. ``False``: the claim was lost, nothing written."""
    conds = [Expect(key=tr.task_key(c.task.id), value=c.raw)]
    return await (write or storage.conditional_batch)(conds, _finish_ops(c, result))


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
        slot=None,
    )
    raw = tr.encode(task)
    ops: list[Op] = [
        Put(key=tr.task_key(task.id), value=raw),
        Put(key=task.ready_key, value=raw),  # the ready entry carries the record
        Delete(key=c.lease),
        *limits.slot_ops(c.task),
    ]
    return await storage.conditional_batch([Expect(key=tr.task_key(task.id), value=c.raw)], ops)


async def reap(storage: Storage, now: float, limit: int = 200) -> int:
    """Fail the attempts whose claims expired (their worker stopped heartbeating).

    The step's retry policy then decides about a next attempt. Returns how many.
    """
    await limits.free_orphans(storage)
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
            *limits.slot_ops(task),
        ]
        assert isinstance(raw, bytes)
        if await storage.conditional_batch([Expect(key=tr.task_key(tid), value=raw)], ops):
            log.warning("%s", result.error.message if result.error else "claim expired")
            reaped += 1
    if stale:
        await storage.batch(stale)
    return reaped
