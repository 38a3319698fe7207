"""A doorbell: cross-process wake-ups between processes sharing one SQLite file.

PostgreSQL tells other processes about a write with LISTEN/NOTIFY. SQLite has no
such thing, but every process sharing an SQLite file runs on one host, so a Unix
datagram socket serves: each listener binds a socket in a directory named after the
database file, and ringing a channel sends one byte to every socket of that channel
there. A socket whose process died refuses the byte and is removed. Rings are best
effort: every listener still looks for itself now and then.
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
from collections.abc import Callable

from pyweft.storage.base import Storage, Unlisten

log = logging.getLogger("pyweft.storage")


def bell_dir(storage: Storage) -> str | None:
    """The doorbell directory of an SQLite store (``None`` for other stores, or when
    it cannot be made)."""
    from pyweft.storage.sqlite import SQLiteStorage

    if not isinstance(storage, SQLiteStorage) or not hasattr(socket, "AF_UNIX"):
        return None
    # Under the temp dir, not beside the database: a socket path is limited to ~100 bytes.
    digest = hashlib.sha256(os.path.realpath(storage.path).encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), "pyweft-bells", digest)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        log.warning(
            "no doorbell for %s (%s); cross-process wake-ups fall back to polling",
            storage.path,
            exc,
        )
        return None
    return path


def ring_dir(path: str, channel: str) -> None:
    """Wake every listener of ``channel`` in ``path`` (best effort, never blocks)."""
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


def listen_dir(path: str, channel: str, callback: Callable[[], None]) -> Unlisten:
    """Call ``callback`` on the running loop at each ring of ``channel``."""
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
