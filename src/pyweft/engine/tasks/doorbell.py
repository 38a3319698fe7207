"""Cross-process wake-ups for task queues: store notifications, or a doorbell.

Workers must hear about a new task, and engines about a task's outcome, in
milliseconds, not at their next poll. PostgreSQL's LISTEN/NOTIFY (the store's
``notify``/``listen``) does that across machines. SQLite has no such thing, but
every process sharing an SQLite file is on one host, so a *doorbell* serves
(:mod:`pyweft.storage.doorbell`, Unix datagram sockets). Rings are best effort either
way: every listener still polls now and then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from pyweft.storage.base import Expect, Op, Storage, notifies_on_commit, ringing
from pyweft.storage.doorbell import bell_dir, listen_dir, ring_dir

log = logging.getLogger("pyweft.tasks")

Unlisten = Callable[[], Awaitable[None]]


class Notifier:
    """Ring and listen on named channels for one store."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._dir = bell_dir(storage)
        self._store_notify = getattr(storage, "notify", None)
        self._store_listen = getattr(storage, "listen", None)
        self._on_commit = notifies_on_commit(storage)
        self._pending: dict[str, bool] = {}  # channel -> another ring asked for meanwhile

    @property
    def available(self) -> bool:
        return self._store_notify is not None or self._dir is not None

    async def ring(self, channel: str) -> None:
        if self._store_notify is not None:
            try:
                await self._store_notify(channel)
            except Exception as exc:  # best effort: listeners poll too
                log.debug("notify %s failed: %s", channel, exc)
        elif self._dir is not None:
            ring_dir(self._dir, channel)

    @property
    def rings_on_commit(self) -> bool:
        """The store sends a write's rings in the write's own transaction."""
        return self._on_commit

    async def write(
        self, conditions: Sequence[Expect], ops: Sequence[Op], channels: Sequence[str]
    ) -> bool:
        """``conditional_batch``, then ring ``channels`` if it held: with the write itself
        where the store can (no trip of its own), else right after it."""
        if self._on_commit:
            with ringing(channels):
                return await self._storage.conditional_batch(conditions, ops)
        ok = await self._storage.conditional_batch(conditions, ops)
        if ok:
            for channel in channels:
                self.ring_soon(channel)
        return ok

    def ring_soon(self, channel: str) -> None:
        """Ring once for every call made until the ring goes out: under load, many
        writes share one notification instead of one round trip each."""
        if channel in self._pending:
            self._pending[channel] = True
            return
        self._pending[channel] = False
        asyncio.get_running_loop().create_task(self._ring_pending(channel))

    async def _ring_pending(self, channel: str) -> None:
        try:
            while True:
                await self.ring(channel)
                if not self._pending.get(channel):
                    return
                self._pending[channel] = False
        finally:
            self._pending.pop(channel, None)

    async def listen(self, channel: str, callback: Callable[[], None]) -> Unlisten | None:
        """Call ``callback`` on the loop at each ring; ``None`` when nothing can ring."""
        if self._store_listen is not None:
            try:
                unlisten: Unlisten = await self._store_listen(channel, callback)
                return unlisten
            except Exception as exc:
                log.warning("task notifications unavailable (%s); polling only", exc)
                return None
        if self._dir is None:
            return None
        return listen_dir(self._dir, channel, callback)
