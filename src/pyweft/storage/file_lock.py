"""One engine per SQLite file: an OS lock on ``<database>.lock``, held while the engine runs.

``fcntl.flock`` locks belong to an open file description, so the kernel drops
the lock when the holder's process dies however it dies (SIGKILL included),
and a second ``open()`` of the same file in the *same* process conflicts too:
two engines in one process are refused just like two processes. The holder
writes who it is (pid, host, engine id, since when) into the file so that the
refusal can name it. The file itself is never deleted: unlinking a lock file
lets a late opener lock an inode nobody else looks at any more.

The lock guards against two engines on one host (or on one shared filesystem
whose ``flock`` works across hosts); it is not a fence. Engines on several
hosts share a store with ``ownership="lease"`` or ``"workflow-lease"``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from datetime import UTC, datetime
from typing import Any

from pyweft.errors import StoreInUseError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock, no guard
    fcntl = None  # type: ignore[assignment]

SUFFIX = ".lock"


def lock_path(database: str) -> str:
    return database + SUFFIX


class StoreFileLock:
    """The exclusive lock beside one SQLite database; ``acquire`` once, ``release`` once."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.path = lock_path(database)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, engine_id: str, instance_id: str) -> None:
        """Take the lock or raise :class:`StoreInUseError` naming who has it."""
        if self._fd is not None or fcntl is None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise StoreInUseError(
                f"cannot create the lock file {self.path} beside the SQLite database "
                f"({exc.strerror}); the engine needs write access to that directory"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _describe(_read_holder(fd))
            os.close(fd)
            raise StoreInUseError(
                f"the SQLite store {self.database} is in use by another pyweft engine "
                f"({holder}). Two engines driving one store with ownership='none' would run "
                "the same steps twice. Stop that engine first; or, to share the store, open "
                "every engine with ownership='lease' (one active engine, hand-over on rolling "
                "deploys) or ownership='workflow-lease' (many engines share the runs); or open "
                "this one with role='client' to only read and send messages",
                holder=holder,
            ) from None
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "engine_id": engine_id,
            "instance": instance_id,
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        with contextlib.suppress(OSError):  # the record only improves the error message
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None or fcntl is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # a stale record must not name a process that let go
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _read_holder(fd: int) -> dict[str, Any] | None:
    # The holder writes its record right after locking; give it a moment.
    for _ in range(20):
        try:
            raw = os.pread(fd, 4096, 0)
        except OSError:
            return None
        if raw:
            try:
                data = json.loads(raw)
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
        time.sleep(0.005)
    return None


def _describe(record: dict[str, Any] | None) -> str:
    if record is None:
        return "holder unknown"
    parts = [f"pid {record.get('pid')} on {record.get('host')}"]
    if record.get("engine_id"):
        parts.append(f"engine id {record['engine_id']}")
    if record.get("since"):
        parts.append(f"since {record['since']}")
    return ", ".join(parts)
