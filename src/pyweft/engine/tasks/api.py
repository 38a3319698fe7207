"""The engine's worker surface: ``workers()``, ``drain_worker()``, ``resume_worker()``,
``activity_queues()`` and activity queue limits.

``Engine`` inherits it; the CLI (``pyweft workers``) and, later, the server and
dashboard use it rather than reading worker records themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyweft.definitions import Duration
from pyweft.engine.tasks import limits, queue_stats, workers
from pyweft.engine.tasks.broker import TaskBroker
from pyweft.engine.tasks.limits import QueueLimits
from pyweft.engine.tasks.queue_stats import ActivityQueueInfo
from pyweft.engine.tasks.records import check_queue as tr_check_queue
from pyweft.engine.tasks.workers import WorkerInfo

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore


class WorkersAPI:
    """Worker processes that serve this store's task queues (mixed into ``Engine``)."""

    _core: EngineCore

    async def workers(self, *, include_gone: bool = False) -> list[WorkerInfo]:
        """Workers with a liveness record: live ones, and with ``include_gone`` those whose
        heartbeat is overdue (a record is removed when its worker stops cleanly)."""
        services = self._core.services_or_raise()
        return await workers.list_workers(
            services.storage, services.clock.now(), include_gone=include_gone
        )

    async def drain_worker(self, worker_id: str) -> WorkerInfo | None:
        """Ask a worker to stop claiming tasks; what it runs finishes. It stays up (see
        ``resume_worker``); its status reads ``draining``, then ``drained``."""
        services = self._core.services_or_raise()
        return await workers.set_drain(services.storage, worker_id, True)

    async def resume_worker(self, worker_id: str) -> WorkerInfo | None:
        """Let a drained worker claim tasks again."""
        services = self._core.services_or_raise()
        return await workers.set_drain(services.storage, worker_id, False)

    async def activity_queues(self, queue: str | None = None) -> list[ActivityQueueInfo]:
        """Activity task queues now: tasks waiting and in flight, how long the oldest has
        waited, the live workers serving each, and its limits. Every queue with
        outstanding tasks or live workers, by name; or only ``queue``. It reads every
        outstanding task record, so it is for operators, not for a hot path."""
        services = self._core.services_or_raise()
        name = None if queue is None else tr_check_queue(queue)
        return await queue_stats.activity_queues(services.storage, services.clock.now(), name)

    def task_broker(self) -> TaskBroker:
        """Claim task attempts on behalf of workers that do not reach the store (the
        server's WebSocket task streams use it); the engine must be open."""
        services = self._core.services_or_raise()
        return TaskBroker(services.storage, services.clock, services.codec)

    async def set_activity_queue_limits(
        self,
        queue: str,
        *,
        concurrency: int | None = None,
        rate_limit: tuple[int, Duration] | None = None,
    ) -> QueueLimits:
        """Limit an activity queue across every worker: at most ``concurrency`` attempts
        running at once, at most ``rate_limit[0]`` starts in any ``rate_limit[1]`` window.
        Both ``None`` removes the limits. Workers apply them from their next claim."""
        services = self._core.services_or_raise()
        checked = limits.check(queue, concurrency, rate_limit)
        await limits.store(services.storage, checked)
        return checked

    async def activity_queue_limits(self, queue: str) -> QueueLimits | None:
        """The limits set on an activity queue, or ``None``."""
        services = self._core.services_or_raise()
        return await limits.load(services.storage, limits.check(queue, None, None).queue)
