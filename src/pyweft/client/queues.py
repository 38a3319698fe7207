"""The HTTP client's queues and workers (mixed into :class:`~pyweft.client.Client`;
the routes are ``server/routes_queues.py``): the same methods and records as
``engine.queues()``, ``queue_info()``, ``workers()``, ``drain_worker()``,
``resume_worker()`` and ``activity_queue_limits()``."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

from pyweft import QueueInfo, WorkerInfo


def _seg(value: str) -> str:
    return quote(value, safe="")


def queue_from_json(data: dict[str, Any]) -> QueueInfo:
    rate = data.get("rate_limit")
    return QueueInfo(
        name=data["name"],
        concurrency=data.get("concurrency"),
        worker_concurrency=data.get("worker_concurrency"),
        rate_limit=None if rate is None else (int(rate[0]), float(rate[1])),
        priority=bool(data.get("priority")),
        partitioned=bool(data.get("partitioned")),
        depth=data["depth"],
        delayed=data.get("delayed", 0),
        in_flight=data["in_flight"],
        oldest_wait_s=data.get("oldest_wait_s"),
        recent_starts=data.get("recent_starts"),
        partitions=data.get("partitions", 0),
    )


def worker_from_json(data: dict[str, Any]) -> WorkerInfo:
    return WorkerInfo(
        id=data["id"],
        queues=tuple(data["queues"]),
        activities=tuple(data["activities"]),
        concurrency=data["concurrency"],
        in_flight=data["in_flight"],
        status=data["status"],
        started_at=datetime.fromisoformat(data["started_at"]),
        last_heartbeat=datetime.fromisoformat(data["last_heartbeat"]),
        host=data["host"],
        pid=data["pid"],
        drain_requested=data["drain_requested"],
        completed=data["completed"],
        failed=data["failed"],
    )


class QueuesClient:
    """Mixed into ``Client``: it provides ``_call``."""

    _call: Callable[..., Any]

    async def queues(self) -> builtins.list[QueueInfo]:
        """Every workflow queue defined on the server's store."""
        data = await self._call("GET", "/queues")
        return [queue_from_json(q) for q in data["items"]]

    async def queue_info(self, name: str) -> QueueInfo:
        """One workflow queue; ``QueueNotFoundError`` for a name no engine defined."""
        return queue_from_json(await self._call("GET", f"/queues/{_seg(name)}"))

    async def workers(self, *, include_gone: bool = False) -> builtins.list[WorkerInfo]:
        """Worker processes with a liveness record (and overdue ones with ``include_gone``)."""
        params = {"include_gone": "true"} if include_gone else None
        data = await self._call("GET", "/workers", params=params)
        return [worker_from_json(w) for w in data["items"]]

    async def drain_worker(self, worker_id: str) -> WorkerInfo | None:
        """Ask a worker to stop claiming tasks (needs scope ``workers:write``).

        Asking twice is the same as once, so a call whose answer was lost is retried."""
        data = await self._call(
            "POST", f"/workers/{_seg(worker_id)}/drain", body={}, idempotent=True
        )
        return None if data["worker"] is None else worker_from_json(data["worker"])

    async def resume_worker(self, worker_id: str) -> WorkerInfo | None:
        """Let a drained worker claim tasks again (needs scope ``workers:write``)."""
        data = await self._call(
            "POST", f"/workers/{_seg(worker_id)}/resume", body={}, idempotent=True
        )
        return None if data["worker"] is None else worker_from_json(data["worker"])
