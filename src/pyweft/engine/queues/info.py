"""What ``engine.queues()``, ``engine.queue_info(name)`` and ``pyweft queues`` report.

Read from the store, so any process sees every engine's queues (a queue's limits are
the definition its engines last stored), including a CLI that registers none.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from pyweft.engine.queues import layout
from pyweft.engine.queues.queue import StoredQueue
from pyweft.storage.base import Storage

_stored_dec = msgspec.msgpack.Decoder(StoredQueue)


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueInfo:
    """One workflow queue, now. Times are in seconds.

    ``depth``: runs waiting (``enqueued``), ``delayed`` of them not due yet;
    ``in_flight``: runs dispatched and not finished, on every engine;
    ``oldest_wait_s``: how long the longest-waiting run has waited (``None``: none
    waits); ``recent_starts``: starts within the rate-limit window (``None`` without
    a rate limit); ``partitions``: partitions with runs waiting or running.
    """

    name: str
    concurrency: int | None
    worker_concurrency: int | None
    rate_limit: tuple[int, float] | None
    priority: bool
    partitioned: bool
    depth: int
    delayed: int
    in_flight: int
    oldest_wait_s: float | None
    recent_starts: int | None
    partitions: int

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "concurrency": self.concurrency,
            "worker_concurrency": self.worker_concurrency,
            "rate_limit": None if self.rate_limit is None else list(self.rate_limit),
            "priority": self.priority,
            "partitioned": self.partitioned,
            "depth": self.depth,
            "delayed": self.delayed,
            "in_flight": self.in_flight,
            "oldest_wait_s": self.oldest_wait_s,
            "recent_starts": self.recent_starts,
            "partitions": self.partitions,
        }


def encode_stored(stored: StoredQueue) -> bytes:
    return msgspec.msgpack.encode(stored)


async def stored_queues(storage: Storage) -> dict[str, StoredQueue]:
    found: dict[str, StoredQueue] = {}
    for _, raw in await storage.scan(layout.DEF_PREFIX):
        try:
            stored = _stored_dec.decode(raw)
        except msgspec.DecodeError:
            continue  # unreadable definition: not shown rather than failing the listing
        found[stored.name] = stored
    return found


async def read_info(storage: Storage, stored: StoredQueue, now: float) -> QueueInfo:
    name = stored.name
    if stored.partitioned:
        parts = [layout.last_part(k) for k, _ in await storage.scan(layout.marker_prefix(name))]
    else:
        parts = [""]
    depth = delayed = in_flight = recent = busy = 0
    oldest: float | None = None
    for part in parts:
        waiting = await storage.scan(layout.waiting_prefix(name, part))
        slots = await storage.scan(layout.slot_prefix(name, part))
        depth += len(waiting)
        in_flight += len(slots)
        busy += 1 if waiting or slots else 0
        for key, value in waiting:
            if value and float(value.decode()) > now:
                delayed += 1
                continue
            since = layout.time_part(key)
            oldest = since if oldest is None else min(oldest, since)
        if stored.rate_window_s is not None:
            starts = await storage.scan(layout.starts_prefix(name, part))
            recent += sum(1 for k, _ in starts if layout.time_part(k) > now - stored.rate_window_s)
    rate = (
        None
        if stored.rate_count is None or stored.rate_window_s is None
        else (stored.rate_count, stored.rate_window_s)
    )
    return QueueInfo(
        name=name,
        concurrency=stored.concurrency,
        worker_concurrency=stored.worker_concurrency,
        rate_limit=rate,
        priority=stored.priority,
        partitioned=stored.partitioned,
        depth=depth,
        delayed=delayed,
        in_flight=in_flight,
        oldest_wait_s=None if oldest is None else max(0.0, now - oldest),
        recent_starts=None if rate is None else recent,
        partitions=busy,
    )
