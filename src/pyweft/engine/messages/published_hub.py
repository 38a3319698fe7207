"""How readers of published events and streams hear that a run wrote something.

A run that sets an event or writes a stream chunk kicks the hub of its store
after the commit: readers in this process wake at once. The hub also announces
the write on the ``published`` topic, so readers in other processes wake within
milliseconds: by the store's notifications where it has them (PostgreSQL's
LISTEN/NOTIFY, memory), else by the SQLite doorbell
(:mod:`pyweft.storage.doorbell`). Announcements are single-flight with one
trailing resend, so a run writing a burst of chunks costs a handful of
notifications, not one per chunk. Readers still look now and then
(``SAFETY_POLL_S``) for notifications lost to a dropped connection or a full
socket buffer; on a store with neither (``FALLBACK_POLL_S``) that is all they do.

The hub listens only while someone waits: the first waiting reader opens the
listener and the last one to leave closes it, so an engine with no readers holds
no extra connection and nothing needs closing when the engine closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pyweft.storage.base import Storage, Unlisten
from pyweft.storage.doorbell import bell_dir, listen_dir, ring_dir

TOPIC = "published"
FALLBACK_POLL_S = 0.05  # stores that cannot tell other processes of a write
SAFETY_POLL_S = 1.0  # stores that can: only for notifications that were lost

log = logging.getLogger("pyweft.published")

_hubs: weakref.WeakKeyDictionary[Any, PublishedHub] = weakref.WeakKeyDictionary()


class PublishedHub:
    """Wake-ups for readers of one store, shared by every engine on it in this process."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._seq = 0
        self._changed = asyncio.Event()
        self._readers = 0
        self._unlisten: Unlisten | None = None
        self._listening: asyncio.Task[None] | None = None
        self._announcing: asyncio.Task[None] | None = None
        self._again = False
        self._notify: Callable[[str], Awaitable[None]] | None = getattr(storage, "notify", None)
        self._listener: Callable[[str, Callable[[], None]], Awaitable[Unlisten]] | None = getattr(
            storage, "listen", None
        )
        if self._notify is None or self._listener is None:
            bells = bell_dir(storage)
            if bells is not None:
                self._notify, self._listener = _doorbell(bells)

    @property
    def can_notify(self) -> bool:
        return self._listener is not None

    @property
    def seq(self) -> int:
        """Grows on every wake-up: a reader compares it before and after looking."""
        return self._seq

    def kick(self) -> None:
        self._seq += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self, seen: int, timeout: float) -> None:
        """Return once a wake-up came after ``seen`` (or after ``timeout`` seconds)."""
        if self._seq != seen:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()

    def poll_s(self) -> float:
        return SAFETY_POLL_S if self.can_notify else FALLBACK_POLL_S

    def announce(self) -> None:
        """After a committed write: wake readers here now, and elsewhere soon."""
        self.kick()
        if self._notify is None:
            return
        if self._announcing is not None and not self._announcing.done():
            self._again = True
            return
        self._announcing = asyncio.get_running_loop().create_task(self._announce())

    async def _announce(self) -> None:
        notify = self._notify
        while notify is not None:
            self._again = False
            try:
                await notify(TOPIC)
            except Exception as exc:  # best effort: readers also look for themselves
                log.debug("could not announce a published write: %s", exc)
            if not self._again:
                return

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[None]:
        """Hold the cross-process listener open while the caller reads."""
        self._readers += 1
        try:
            await self._listen()
            yield
        finally:
            self._readers -= 1
            if self._readers == 0:
                await self._stop_listening()

    async def _listen(self) -> None:
        listen = self._listener
        if listen is None or self._unlisten is not None:
            return
        if self._listening is None:
            self._listening = asyncio.get_running_loop().create_task(self._open(listen))
        await asyncio.shield(self._listening)

    async def _open(self, listen: Any) -> None:
        try:
            self._unlisten = await listen(TOPIC, self.kick)
        except Exception as exc:
            log.warning("published-write notifications unavailable (%s); polling", exc)
        finally:
            self._listening = None

    async def _stop_listening(self) -> None:
        unlisten, self._unlisten = self._unlisten, None
        if unlisten is not None:
            with contextlib.suppress(Exception):
                await unlisten()


def _doorbell(
    path: str,
) -> tuple[
    Callable[[str], Awaitable[None]], Callable[[str, Callable[[], None]], Awaitable[Unlisten]]
]:
    """``notify`` and ``listen`` over the doorbell directory ``path``."""

    async def notify(topic: str) -> None:
        ring_dir(path, topic)

    async def listen(topic: str, callback: Callable[[], None]) -> Unlisten:
        return listen_dir(path, topic, callback)

    return notify, listen


def hub_for(storage: Storage) -> PublishedHub:
    """The hub of ``storage`` in this process (made on first use)."""
    hub = _hubs.get(storage)
    if hub is None:
        hub = _hubs[storage] = PublishedHub(storage)
    return hub
