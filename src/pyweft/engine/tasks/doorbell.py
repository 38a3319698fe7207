"""Cross-process wake-ups for task queues: store notifications, or a doorbell.

Workers must hear about a new task, and engines about a task's outcome, in
milliseconds, not at their next poll. PostgreSQL's LISTEN/NOTIFY (the store's
``notify``/``listen``) does that across machines. SQLite has no such thing, but
every process sharing an SQLite file is on one host, so a *doorbell* serves: each
listener binds a Unix datagram socket in a directory named after the database
file, and ringing sends one byte to every socket there. A socket whose process
died refuses the byte and is removed. Rings are best effort either way: every
listener still polls now and then.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
import tempfile
import uuid
from collections.abc import Awaitable, Callable

from pyweft.storage.base import Storage

log = logging.getLogger("pyweft.tasks")

Unlisten = Callable[[], Awaitable[None]]


class Notifier:
    """Ring and listen on named channels for one store."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._dir = _bell_dir(storage)
        self._store_notify = getattr(storage, "notify", None)
        self._store_listen = getattr(storage, "listen", None)
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
            _ring_dir(self._dir, channel)

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
        return _listen_dir(self._dir, channel, callback)


def _bell_dir(storage: Storage) -> str | None:
    from pyweft.storage.sqlite import SQLiteStorage

    if not isinstance(storage, SQLiteStorage) or not hasattr(socket, "AF_UNIX"):
        return None
    # Under the temp dir, not beside the database: a socket path is limited to ~100 bytes.
    digest = hashlib.sha256(os.path.realpath(storage.path).encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), "pyweft-bells", digest)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        log.warning("no doorbell for %s (%s); task queues poll", storage.path, exc)
        return None
    return path


def _ring_dir(path: str, channel: str) -> None:
    try:
        names = os.listdir(path)
    except OSError:
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setblocking(False)
    try:
        for name in names:
            if not name.startswith(channel + "."):
                continue
            target = os.path.join(path, name)
            try:
                sock.sendto(b"!", target)
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(OSError):  # its process is gone
                    os.unlink(target)
            except OSError:
                pass  # its buffer is full: it has a ring pending already
    finally:
        sock.close()


def _listen_dir(path: str, channel: str, callback: Callable[[], None]) -> Unlisten:
    loop = asyncio.get_running_loop()
    target = os.path.join(path, f"{channel}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setblocking(False)
    sock.bind(target)

    def readable() -> None:
        try:
            while True:
                sock.recv(64)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            return
        callback()

    loop.add_reader(sock.fileno(), readable)

    async def unlisten() -> None:
        with contextlib.suppress(Exception):
            loop.remove_reader(sock.fileno())
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(target)

    return unlisten
