"""Who an engine is: a stable ``engine_id``, and the process that runs it right now.

The ``engine_id`` names the *deployment* (the same app on the same host and
store gets the same one after a restart); the ``instance_id`` names one
process's engine and is never reused. Lease and claim records carry both,
plus the pid, the host, the process's start time and the boot id, so that a
restarted engine can prove its previous incarnation is gone and take its
work back at once instead of waiting for a TTL.

"Provably gone" is deliberately narrow: same ``engine_id``, same host, and
the recorded process is dead (no such pid, a zombie, a pid reused by a
process that started at another time, or a machine that rebooted since).
Another live process with the same ``engine_id`` is never robbed.
"""

from __future__ import annotations

import hashlib
import os
import socket
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True, kw_only=True, slots=True)
class Incarnation:
    """One engine in one process, as lease and claim records describe it."""

    engine_id: str
    instance_id: str
    host: str
    pid: int
    started: str | None = None  # the process's start time (``/proc/<pid>/stat`` field 22)
    boot: str | None = None  # the kernel's boot id when the record was written

    def fields(self) -> dict[str, Any]:
        """The extra fields a holder record carries (JSON-ready)."""
        return {
            "engine_id": self.engine_id,
            "instance": self.instance_id,
            "host": self.host,
            "pid": self.pid,
            "started": self.started,
            "boot": self.boot,
        }

    def describe(self) -> str:
        return f"engine {self.engine_id!r} (pid {self.pid} on {self.host})"


def incarnation_from(data: Mapping[str, Any], instance_id: str) -> Incarnation | None:
    """The incarnation a decoded holder record names; ``None`` for records written before
    pyweft recorded one (they can only expire, never be taken back early)."""
    engine_id, host, pid = data.get("engine_id"), data.get("host"), data.get("pid")
    if not isinstance(engine_id, str) or not isinstance(host, str) or type(pid) is not int:
        return None
    started, boot = data.get("started"), data.get("boot")
    return Incarnation(
        engine_id=engine_id,
        instance_id=instance_id,
        host=host,
        pid=pid,
        started=started if isinstance(started, str) else None,
        boot=boot if isinstance(boot, str) else None,
    )


def new_instance_id(host: str | None = None) -> str:
    return f"{host or socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def default_engine_id(store: str, workflow_types: Iterable[str], host: str | None = None) -> str:
    """Host + a digest of (store location, registered workflow types): the same app
    restarted on the same host against the same store gets the same id."""
    digest = hashlib.sha256(
        "\n".join([store, *sorted(workflow_types)]).encode("utf-8", "surrogatepass")
    ).hexdigest()[:12]
    return f"{host or socket.gethostname()}/{digest}"


def current(engine_id: str, instance_id: str) -> Incarnation:
    pid = os.getpid()
    return Incarnation(
        engine_id=engine_id,
        instance_id=instance_id,
        host=socket.gethostname(),
        pid=pid,
        started=process_start(pid),
        boot=boot_id(),
    )


def boot_id() -> str | None:
    try:
        with open(_BOOT_ID_PATH, encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')'.
    return text[text.rfind(")") + 2 :].split()


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, or ``None`` where unknown."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    fields = _stat_fields(pid)
    return not (fields is not None and fields[0] in ("Z", "X"))  # a zombie runs nothing


def provably_gone(holder: Incarnation | None, me: Incarnation) -> bool:
    """True when ``holder`` is an earlier incarnation of this very engine that cannot run
    any more; False whenever that cannot be proven (then only its TTL frees its work)."""
    if holder is None or holder.instance_id == me.instance_id:
        return False
    if holder.engine_id != me.engine_id or holder.host != me.host:
        return False
    if holder.boot is not None and me.boot is not None and holder.boot != me.boot:
        return True  # the machine rebooted since the record was written
    if holder.pid == me.pid:
        # Our own pid: either another engine in this very process (alive), or the
        # pid was reused by us after the holder died.
        return holder.started is not None and holder.started != me.started
    if not _alive(holder.pid):
        return True
    if holder.started is None:
        return False
    now_started = process_start(holder.pid)
    return now_started is not None and now_started != holder.started
