"""Worker liveness records, and the operator's view of them: list, drain, resume.

A worker rewrites ``tk:w:{id}`` at each heartbeat with what it serves, how
much it runs, and when it counts as gone if it stops writing. A drain request is
its own key, ``tk:d:{id}``, so an operator never races the worker's rewrites:
the worker reads it at each heartbeat, stops claiming while it is there, and
says so in its record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pyweft.engine.replay import keys
from pyweft.engine.tasks import records as tr
from pyweft.errors import InvalidArgumentError
from pyweft.storage.base import Delete, Put, Storage


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerInfo:
    """A worker process as its liveness record shows it (``engine.workers()``)."""

    id: str
    queues: tuple[str, ...]
    activities: tuple[str, ...]
    concurrency: int
    in_flight: int
    status: Literal["active", "draining", "drained", "gone"]
    started_at: datetime
    last_heartbeat: datetime
    host: str
    pid: int
    drain_requested: bool
    completed: int
    failed: int


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def info_of(rec: tr.WorkerRecord, now: float, drain_requested: bool) -> WorkerInfo:
    if rec.expires_at < now:
        status: Literal["active", "draining", "drained", "gone"] = "gone"
    elif rec.draining:
        status = "draining" if rec.in_flight else "drained"
    else:
        status = "active"
    return WorkerInfo(
        id=rec.id,
        queues=rec.queues,
        activities=rec.activities,
        concurrency=rec.concurrency,
        in_flight=rec.in_flight,
        status=status,
        started_at=_dt(rec.started_at),
        last_heartbeat=_dt(rec.heartbeat_at),
        host=rec.host,
        pid=rec.pid,
        drain_requested=drain_requested,
        completed=rec.completed,
        failed=rec.failed,
    )


async def list_workers(storage: Storage, now: float, *, include_gone: bool) -> list[WorkerInfo]:
    found = await storage.scan(tr.WORKER_PREFIX)
    drains = {k[len(tr.DRAIN_PREFIX) :] for k, _ in await storage.scan(tr.DRAIN_PREFIX)}
    out = []
    for key, raw in found:
        rec = tr.decode_worker(raw, key=key)
        info = info_of(rec, now, key[len(tr.WORKER_PREFIX) :] in drains)
        if include_gone or info.status != "gone":
            out.append(info)
    return out


async def set_drain(storage: Storage, worker_id: str, drain: bool) -> WorkerInfo | None:
    """Ask a worker to drain (or resume). Refuses an id that names no worker record."""
    if not isinstance(worker_id, str) or not worker_id:
        raise InvalidArgumentError(f"a worker id must be a non-empty string, got {worker_id!r}")
    raw = await storage.get(tr.worker_key(worker_id))
    if raw is None:
        raise InvalidArgumentError(
            f"no worker {worker_id!r} is registered in this store; list them with "
            "engine.workers() or `pyweft workers list`"
        )
    key = tr.drain_key(worker_id)
    await storage.batch([Put(key=key, value=b"1")] if drain else [Delete(key=key)])
    rec = tr.decode_worker(raw, key=tr.worker_key(worker_id))
    return info_of(rec, rec.heartbeat_at, drain)


def worker_id_of(key: str) -> str:
    return keys.dec(key[len(tr.WORKER_PREFIX) :])
