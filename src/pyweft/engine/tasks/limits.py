"""Limits of an activity task queue across every worker: concurrency and rate.

``engine.set_activity_queue_limits("api", concurrency=10, rate_limit=(50, "30s"))``
stores ``tk:q:{queue}:!limits``, at the head of the queue's ready entries, so every
claim reads it in the scan that finds the tasks.

Both limits are slots in the store, taken in the same conditional batch as the
claim, so they hold across processes and machines and under faults:

- **concurrency**: ``tk:sc:{queue}:{i}`` for ``i < concurrency`` holds the id of
  the task running in that slot. The outcome, a hand-back or an expired claim
  frees it in the same batch; a slot whose task is gone (the run cancelled the
  step) is freed by the next reap. A SIGKILLed worker's slots come back when its
  claims expire.
- **rate**: ``tk:sr:{queue}:{i}`` for ``i < count`` holds the time of the last
  start that used it; a start takes a slot last used a full window ago (or
  never). With ``count`` slots, no window of that length ever sees more than
  ``count`` starts.
"""

from __future__ import annotations

import math

import msgspec

from pyweft.definitions import Duration
from pyweft.durations import parse_duration
from pyweft.engine.tasks import records as tr
from pyweft.errors import InvalidArgumentError
from pyweft.storage.base import Delete, Expect, Op, Put, Storage

CONCURRENCY_PREFIX = "tk:sc:"
RATE_PREFIX = "tk:sr:"
MIN_WINDOW_S = 0.001  # the clock resolution the slots rely on
MAX_SLOTS = 10_000


class QueueLimits(msgspec.Struct, array_like=True, frozen=True):
    """The limits of one activity queue (``engine.activity_queue_limits(queue)``)."""

    queue: str
    concurrency: int | None = None
    rate_count: int | None = None
    rate_window_s: float | None = None


_dec = msgspec.msgpack.Decoder(QueueLimits)


def config_key(queue: str) -> str:
    """First in the queue's ready range ('!' sorts before the times of ready entries), so
    the scan a worker claims from reads the limits too."""
    return tr.ready_prefix(queue) + "!limits"


def decode(raw: bytes) -> QueueLimits:
    return _dec.decode(raw)


def concurrency_key(queue: str, i: int) -> str:
    return f"{CONCURRENCY_PREFIX}{queue}:{i:05d}"


def rate_key(queue: str, i: int) -> str:
    return f"{RATE_PREFIX}{queue}:{i:05d}"


def check(
    queue: object, concurrency: object, rate_limit: tuple[int, Duration] | None
) -> QueueLimits:
    """Limits from user input, or :class:`InvalidArgumentError` naming what is wrong."""
    name = tr.check_queue(queue)
    if concurrency is not None and (
        type(concurrency) is not int or not 1 <= concurrency <= MAX_SLOTS
    ):
        raise InvalidArgumentError(
            f"concurrency must be an int from 1 to {MAX_SLOTS} (or None for no limit), "
            f"got {concurrency!r}"
        )
    count: int | None = None
    window: float | None = None
    if rate_limit is not None:
        if not isinstance(rate_limit, tuple) or len(rate_limit) != 2:
            raise InvalidArgumentError(
                f"rate_limit must be (starts, window), e.g. (50, '30s'), got {rate_limit!r}"
            )
        count_given, window_given = rate_limit
        if type(count_given) is not int or not 1 <= count_given <= MAX_SLOTS:
            raise InvalidArgumentError(
                f"rate_limit starts must be an int from 1 to {MAX_SLOTS}, got {count_given!r}"
            )
        if isinstance(window_given, float) and math.isnan(window_given):
            raise InvalidArgumentError("rate_limit window must be a duration, got NaN")
        window = parse_duration(window_given, field="rate_limit window")
        if not window >= MIN_WINDOW_S:
            raise InvalidArgumentError(
                f"rate_limit window must be at least {MIN_WINDOW_S}s (the clock's "
                f"resolution), got {window_given!r}"
            )
        count = count_given
    return QueueLimits(queue=name, concurrency=concurrency, rate_count=count, rate_window_s=window)


async def store(storage: Storage, limits: QueueLimits) -> None:
    if limits.concurrency is None and limits.rate_count is None:
        await storage.batch([Delete(key=config_key(limits.queue))])
    else:
        await storage.batch(
            [Put(key=config_key(limits.queue), value=msgspec.msgpack.encode(limits))]
        )


async def load(storage: Storage, queue: str) -> QueueLimits | None:
    raw = await storage.get(config_key(queue))
    return None if raw is None else _dec.decode(raw)


class Grant(msgspec.Struct, frozen=True):
    """Slots a claim takes: conditions and writes to add to its batch, per task."""

    conds: list[Expect]
    ops: list[Op]
    slot: str | None


async def grants(
    storage: Storage,
    limits: QueueLimits,
    now: float,
    wanted: int,
    wake: list[float] | None = None,
) -> list[Grant]:
    """Up to ``wanted`` grants that the limits allow right now (each one start). If the
    rate limit allows fewer, the time its window next frees a start goes in ``wake``."""
    queue = limits.queue
    per_task: list[tuple[list[Expect], list[Op], str | None]] = [
        ([], [], None) for _ in range(wanted)
    ]
    n = wanted
    if limits.concurrency is not None:
        taken = {k for k, _ in await storage.scan(f"{CONCURRENCY_PREFIX}{queue}:")}
        free = [
            concurrency_key(queue, i)
            for i in range(limits.concurrency)
            if concurrency_key(queue, i) not in taken
        ]
        n = min(n, len(free))
        for i in range(n):
            conds, _, _ = per_task[i]
            conds.append(Expect(key=free[i], value=None))
            per_task[i] = (conds, per_task[i][1], free[i])
    if limits.rate_count is not None and limits.rate_window_s is not None:
        used = dict(await storage.scan(f"{RATE_PREFIX}{queue}:"))
        usable: list[tuple[str, bytes | None]] = []
        frees: list[float] = []  # when each start in the window leaves it
        for i in range(limits.rate_count):
            key = rate_key(queue, i)
            last = used.get(key)
            if last is None or float(last.decode()) <= now - limits.rate_window_s:
                usable.append((key, last))
            else:
                frees.append(float(last.decode()) + limits.rate_window_s)
        if len(usable) < n and wake is not None:  # held back: when the next start frees
            wake.append(min(frees, default=now + limits.rate_window_s))
        n = min(n, len(usable))
        for i in range(n):
            key, last = usable[i]
            per_task[i][0].append(Expect(key=key, value=last))
            per_task[i][1].append(Put(key=key, value=repr(now).encode()))
    return [Grant(conds=c, ops=o, slot=s) for c, o, s in per_task[:n]]


def slot_ops(task: tr.Task) -> list[Op]:
    """Free the concurrency slot a task holds (with its outcome, hand-back or expiry)."""
    return [] if task.slot is None else [Delete(key=task.slot)]


async def free_orphans(storage: Storage, limit: int = 500) -> int:
    """Free concurrency slots whose task is gone (withdrawn with its step)."""
    from pyweft.storage.base import Get, read_many

    slots = await storage.scan(CONCURRENCY_PREFIX, limit=limit)
    if not slots:
        return 0
    found = await read_many(storage, [Get(key=tr.task_key(raw.decode())) for _, raw in slots])
    freed = 0
    for (key, raw), task in zip(slots, found, strict=True):
        if task is None and await storage.conditional_batch(
            [Expect(key=key, value=raw), Expect(key=tr.task_key(raw.decode()), value=None)],
            [Delete(key=key)],
        ):
            freed += 1
    return freed
