"""The engine's workflow-queue surface: registering queues, enqueueing runs, and
reading queue depth and limits. ``Engine`` inherits it; the work happens in
``engine/queues``."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple, cast, overload

from pyweft.definitions import Duration, refuse_activity_as_workflow
from pyweft.engine.handle import WorkflowHandle
from pyweft.engine.queues import enqueue as enqueueing
from pyweft.engine.queues import layout
from pyweft.engine.queues.dispatch import Dispatcher
from pyweft.engine.queues.info import QueueInfo, encode_stored, read_info, stored_queues
from pyweft.engine.queues.queue import Queue, check_name, to_stored
from pyweft.errors import ConfigurationError, QueueNotFoundError
from pyweft.storage.base import Expect, Put

if TYPE_CHECKING:
    from pyweft.engine.context import WorkflowContext
    from pyweft.engine.control.core import EngineCore

Ts = TypeVarTuple("Ts")
R = TypeVar("R")


class QueuesAPI:
    """Workflow queues (mixed into :class:`~pyweft.Engine`)."""

    _core: EngineCore
    _queues: dict[str, Queue]
    _queue_defs_stored: set[str]
    _last_enqueued_us: int
    _dispatcher: Dispatcher | None

    def _init_queues(self, queues: Iterable[Queue]) -> None:
        if isinstance(queues, Queue | str):
            raise ConfigurationError(
                f"queues must be a list of Queue objects, got {queues!r} itself; "
                "write queues=[Queue(...)]"
            )
        self._queues = {}
        self._queue_defs_stored = set()
        self._last_enqueued_us = 0
        self._dispatcher = None
        for queue in queues:
            self.register_queue(queue)

    def register_queue(self, queue: Queue) -> Queue:
        """Register a workflow queue; this engine then dispatches its runs (unless it is a
        client) and accepts ``enqueue`` to it. Registering an equal queue again is a
        no-op; another queue under a registered name is a ``ConfigurationError``."""
        if not isinstance(queue, Queue):
            raise ConfigurationError(
                f"register_queue takes a Queue(...), got {queue!r}; "
                'write register_queue(Queue("name", concurrency=...))'
            )
        held = self._queues.get(queue.name)
        if held is not None:
            if held != queue:
                raise ConfigurationError(
                    f"queue {queue.name!r} is already registered with other settings "
                    f"({held!r}); register each queue once, with one definition"
                )
            return held
        self._queues[queue.name] = queue
        dispatcher = self._dispatcher
        if dispatcher is not None:
            if not dispatcher.started:  # the engine opened with no queue
                asyncio.get_running_loop().create_task(dispatcher.start())
            dispatcher.poke(queue.name)
        return queue

    @property
    def registered_queues(self) -> builtins.list[Queue]:
        """The queues registered with this engine."""
        return list(self._queues.values())

    async def _open_queues(self) -> None:
        core = self._core
        if getattr(core.storage, "read_only", False):
            return
        for queue in self._queues.values():
            await self._store_definition(queue)
        if core.drives:
            self._dispatcher = Dispatcher(
                core, self._queues, lambda: str(cast(Any, self).engine_id)
            )
            if self._queues:  # else started by the first register_queue
                await self._dispatcher.start()

    async def _close_queues(self) -> None:
        dispatcher, self._dispatcher = self._dispatcher, None
        if dispatcher is not None:
            await dispatcher.stop()

    async def _store_definition(self, queue: Queue) -> None:
        """Keep the queue's definition in the store, for inspection from any process."""
        if queue.name in self._queue_defs_stored:
            return
        key = layout.definition(queue.name)
        value = encode_stored(to_stored(queue))
        old = await self._core.storage.get(key)
        if old != value:
            await self._core.committer.commit(
                [Put(key=key, value=value)], [Expect(key=key, value=old)]
            )
        self._queue_defs_stored.add(queue.name)

    def _queue(self, queue: Queue | str) -> Queue:
        name = queue.name if isinstance(queue, Queue) else check_name(queue)
        held = self._queues.get(name)
        if held is None or (isinstance(queue, Queue) and held != queue):
            raise QueueNotFoundError(
                f"queue {name!r} is not registered with this engine (registered: "
                f"{', '.join(sorted(self._queues)) or 'none'}). Pass it in "
                "Engine(queues=[Queue(...)]) or call engine.register_queue() first",
                queue=name,
            )
        return held

    @overload
    async def enqueue(
        self,
        queue: Queue | str,
        wf: Callable[[WorkflowContext, *Ts], Awaitable[R]],
        *args: *Ts,
        id: str | None = None,
        priority: int | None = None,
        deduplication_id: str | None = None,
        delay: Duration | None = None,
        partition_key: str | None = None,
    ) -> WorkflowHandle[R]: ...
    @overload
    async def enqueue(
        self,
        queue: Queue | str,
        wf: str,
        *args: Any,
        id: str | None = None,
        priority: int | None = None,
        deduplication_id: str | None = None,
        delay: Duration | None = None,
        partition_key: str | None = None,
    ) -> WorkflowHandle[Any]: ...
    async def enqueue(
        self,
        queue: Queue | str,
        wf: Callable[..., Any] | str,
        *args: object,
        id: str | None = None,
        priority: int | None = None,
        deduplication_id: str | None = None,
        delay: Duration | None = None,
        partition_key: str | None = None,
    ) -> WorkflowHandle[Any]:
        """Store a run as ``enqueued`` on ``queue``; it starts when the queue's limits
        allow. Returns once the run is durably stored.

        ``priority``: lower starts first (queues declared with ``priority=True``; 0 to
        2**31 - 1, default 0). ``deduplication_id``: refused with
        :class:`QueueDeduplicatedError` while a run of this queue with the same id is
        queued or running. ``delay``: not started before this long from now.
        ``partition_key``: required on a partitioned queue; each key has its own limits.
        """
        self._core.services_or_raise()
        refuse_activity_as_workflow(wf, "engine.enqueue")
        held = self._queue(queue)
        await self._store_definition(held)
        state = await enqueueing.enqueue(
            self._core,
            held,
            wf,
            args,
            id=id,
            priority=priority,
            deduplication_id=deduplication_id,
            delay=delay,
            partition_key=partition_key,
            order=self._in_line,
        )
        self._core.emit(
            "enqueued",
            state,
            queue=held.name,
            priority=priority,
            partition_key=partition_key,
            deduplication_id=deduplication_id,
        )
        if self._dispatcher is not None:
            self._dispatcher.poke(held.name)
        await self._announce()  # other engines serving the queue may have room
        return WorkflowHandle(self, state.id)  # type: ignore[arg-type]  # mixed into Engine

    def _in_line(self, now: float) -> float:
        """``now``, moved a microsecond past this engine's previous enqueue if needed."""
        micros = max(round(now * 1_000_000), self._last_enqueued_us + 1)
        self._last_enqueued_us = micros
        return micros / 1_000_000

    async def _announce(self) -> None:
        notify = getattr(self._core.storage, "notify", None)
        if notify is not None:
            with contextlib.suppress(Exception):  # engines also poll
                await notify(enqueueing.QUEUE_TOPIC)

    async def queues(self) -> builtins.list[QueueInfo]:
        """Every queue defined on the store (by any engine), with its depth, runs in
        flight, oldest waiting age, recent starts and limits."""
        self._core.services_or_raise()
        now = self._core.clock.now()
        stored = await stored_queues(self._core.storage)
        return [await read_info(self._core.storage, stored[n], now) for n in sorted(stored)]

    async def queue_info(self, name: str) -> QueueInfo:
        """One queue's depth, runs in flight, oldest waiting age, recent starts and
        limits. Raises :class:`QueueNotFoundError` for a queue no engine defined."""
        self._core.services_or_raise()
        check_name(name)
        stored = (await stored_queues(self._core.storage)).get(name)
        if stored is None:
            raise QueueNotFoundError(
                f"no queue named {name!r} is defined on this store; engines define queues "
                "with Engine(queues=[Queue(...)])",
                queue=name,
            )
        return await read_info(self._core.storage, stored, self._core.clock.now())
