"""The blocking twins of the engine's workflow-queue methods (mixed into
:class:`pyweft.sync.Engine`)."""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, TypeVarTuple, cast, overload

from pyweft.definitions import Duration
from pyweft.engine.handle import WorkflowHandle as AsyncHandle
from pyweft.engine.queues import Queue, QueueInfo
from pyweft.sync.handle import WorkflowHandle

if TYPE_CHECKING:
    from pyweft.engine.context import WorkflowContext
    from pyweft.engine.engine import Engine as AsyncEngine
    from pyweft.sync.engine import Engine
    from pyweft.sync.loop import LoopThread

P = ParamSpec("P")
T = TypeVar("T")
Ts = TypeVarTuple("Ts")
R = TypeVar("R")


class QueuesSync:
    """Workflow queues, blocking: see :class:`pyweft.Engine`'s methods of the same names."""

    _engine: AsyncEngine
    _loop: LoopThread

    def _run(
        self, fn: Callable[P, Coroutine[Any, Any, T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        raise NotImplementedError  # pyweft.sync.Engine's

    def register_queue(self, queue: Queue) -> Queue:
        """Register a workflow queue (see ``pyweft.Engine.register_queue``)."""
        return self._loop.call(self._engine.register_queue, queue)

    @property
    def registered_queues(self) -> builtins.list[Queue]:
        """The queues registered with this engine."""
        return self._loop.call(lambda: self._engine.registered_queues)

    @overload
    def enqueue(
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
    def enqueue(
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
    def enqueue(
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
        """Store a run as ``enqueued`` on ``queue``; it starts when the queue allows."""
        enqueue = cast(Callable[..., Coroutine[Any, Any, AsyncHandle[Any]]], self._engine.enqueue)
        handle = self._run(
            enqueue,
            queue,
            wf,
            *args,
            id=id,
            priority=priority,
            deduplication_id=deduplication_id,
            delay=delay,
            partition_key=partition_key,
        )
        return WorkflowHandle(cast("Engine", self), handle.id)

    def queues(self) -> builtins.list[QueueInfo]:
        """Every workflow queue on the store, with depth, runs in flight and limits."""
        return self._run(self._engine.queues)

    def queue_info(self, name: str) -> QueueInfo:
        """One workflow queue's depth, runs in flight, oldest wait, rate and limits."""
        return self._run(self._engine.queue_info, name)
