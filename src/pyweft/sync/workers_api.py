"""The blocking twins of the engine's worker surface (mixed into ``pyweft.sync.Engine``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyweft.definitions import Duration
from pyweft.engine.tasks.limits import QueueLimits
from pyweft.engine.tasks.queue_stats import ActivityQueueInfo
from pyweft.engine.tasks.workers import WorkerInfo

if TYPE_CHECKING:
    from pyweft.engine.engine import Engine as AsyncEngine


class WorkersTwins:
    """``workers``, ``drain_worker``, ``resume_worker``, ``activity_queues`` and activity
    queue limits."""

    _engine: AsyncEngine
    if TYPE_CHECKING:
        _run: Callable[..., Any]  # pyweft.sync.Engine's: run on its loop and wait

    def workers(self, *, include_gone: bool = False) -> list[WorkerInfo]:
        """Worker processes serving this store (see ``Engine.workers``)."""
        result: list[WorkerInfo] = self._run(self._engine.workers, include_gone=include_gone)
        return result

    def drain_worker(self, worker_id: str) -> WorkerInfo | None:
        """Ask a worker to stop claiming tasks (see ``Engine.drain_worker``)."""
        result: WorkerInfo | None = self._run(self._engine.drain_worker, worker_id)
        return result

    def resume_worker(self, worker_id: str) -> WorkerInfo | None:
        """Let a drained worker claim tasks again."""
        result: WorkerInfo | None = self._run(self._engine.resume_worker, worker_id)
        return result

    def set_activity_queue_limits(
        self,
        queue: str,
        *,
        concurrency: int | None = None,
        rate_limit: tuple[int, Duration] | None = None,
    ) -> QueueLimits:
        """Limit an activity queue across every worker (see ``Engine``)."""
        result: QueueLimits = self._run(
            self._engine.set_activity_queue_limits,
            queue,
            concurrency=concurrency,
            rate_limit=rate_limit,
        )
        return result

    def activity_queue_limits(self, queue: str) -> QueueLimits | None:
        """The limits set on an activity queue, or ``None``."""
        result: QueueLimits | None = self._run(self._engine.activity_queue_limits, queue)
        return result

    def activity_queues(self, queue: str | None = None) -> list[ActivityQueueInfo]:
        """Activity task queues now (see ``Engine.activity_queues``)."""
        result: list[ActivityQueueInfo] = self._run(self._engine.activity_queues, queue)
        return result
