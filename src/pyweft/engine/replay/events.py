"""In-process lifecycle events: ``engine.events()`` and ``handle.events()``.

Events are best effort and local to this process: they are emitted after the
durable write they describe, never instead of it, and a slow consumer loses
the oldest events rather than slowing the engine down.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

EventKind = Literal[
    "enqueued",  # waits in a workflow queue (queue, priority, partition_key, deduplication_id)
    "started",
    "step_completed",
    "step_failed",
    "signal_received",
    "update_completed",
    "review_requested",
    "review_decided",
    "suspended",
    "blocked",
    "resumed",
    "cancel_requested",
    "completed",
    "failed",
    "cancelled",
    "timed_out",
    "warning",
    "activity_async_pending",  # an activity waits for completion by token (data: token)
    # Schedules (data: schedule_id, ...; workflow_id is "" unless the event is about a run):
    "schedule_fired",  # an occurrence started its run (nominal_time, run_id, how)
    "schedule_skipped",  # the overlap policy dropped an occurrence (nominal_time, overlap)
    "schedule_buffered",  # the overlap policy queued an occurrence (nominal_time, waiting)
    "schedule_missed",  # catch-up found occurrences no engine ran (count, window_start/end)
    "schedule_created",
    "schedule_updated",
    "schedule_paused",
    "schedule_resumed",
    "schedule_deleted",
]
TERMINAL_KINDS = frozenset({"completed", "failed", "cancelled", "timed_out"})


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkflowEvent:
    """Something that happened to a run. ``data`` holds kind-specific details."""

    kind: EventKind
    workflow_id: str
    workflow_type: str
    at: datetime
    step: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


EndWatch = Callable[[], Coroutine[Any, Any, "WorkflowEvent | None"]]
"""Waits until a run has ended (as its store says); its terminal event, or ``None``."""


class _Subscriber:
    __slots__ = ("dropped", "queue", "waiter", "watch", "workflow_id")

    def __init__(self, workflow_id: str | None, capacity: int) -> None:
        self.workflow_id = workflow_id
        self.queue: deque[WorkflowEvent] = deque(maxlen=capacity)
        self.waiter: asyncio.Future[None] | None = None
        self.watch: asyncio.Task[WorkflowEvent | None] | None = None
        self.dropped = 0


class EventBus:
    """Fans events out to subscribers; each has a bounded buffer."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._subscribers: set[_Subscriber] = set()
        self._closed = False

    @property
    def active(self) -> bool:
        """True when anyone listens; callers skip building events otherwise."""
        return bool(self._subscribers)

    def emit(self, event: WorkflowEvent) -> None:
        for sub in self._subscribers:
            if sub.workflow_id is not None and sub.workflow_id != event.workflow_id:
                continue
            if len(sub.queue) == sub.queue.maxlen:
                sub.dropped += 1
            sub.queue.append(event)
            if sub.waiter is not None and not sub.waiter.done():
                sub.waiter.set_result(None)

    def close(self) -> None:
        self._closed = True
        for sub in self._subscribers:
            if sub.waiter is not None and not sub.waiter.done():
                sub.waiter.set_result(None)

    def subscribe(
        self,
        workflow_id: str | None = None,
        *,
        until_terminal: bool = False,
        ends: EndWatch | None = None,
    ) -> EventStream:
        """Events as they happen, from this call on (not from the first iteration).

        With ``until_terminal``, the stream ends after the run's terminal event.
        ``ends`` (started at the first iteration) tells when the run has ended
        without an event here (it had already finished, or finished in another
        process): the stream then yields the event ``ends`` returns and stops.
        It also ends when the engine shuts down.
        """
        sub = _Subscriber(workflow_id, self._capacity)
        self._subscribers.add(sub)
        return EventStream(self, sub, until_terminal, ends)

    def _unsubscribe(self, sub: _Subscriber) -> None:
        self._subscribers.discard(sub)
        if sub.watch is not None and not sub.watch.done():
            sub.watch.cancel()


class EventStream(AsyncIterator[WorkflowEvent]):
    """An async iterator of events, subscribed from the moment it was made.

    It buffers what happens before the first ``__anext__``, so nothing between
    subscribing and iterating is missed. Call :meth:`aclose` (or let it end, or
    be garbage-collected) to stop buffering.
    """

    __slots__ = ("__weakref__", "_bus", "_done", "_ends", "_sub", "_until_terminal")

    def __init__(
        self, bus: EventBus, sub: _Subscriber, until_terminal: bool, ends: EndWatch | None = None
    ) -> None:
        self._bus = bus
        self._sub = sub
        self._until_terminal = until_terminal
        self._ends = ends
        self._done = False
        weakref.finalize(self, bus._unsubscribe, sub)

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> WorkflowEvent:
        sub = self._sub
        while not self._done:
            if sub.queue:  # events of this engine first: a run driven here ends with its own
                event = sub.queue.popleft()
                if self._until_terminal and event.kind in TERMINAL_KINDS:
                    self._finish()
                return event
            if self._bus._closed:
                break
            watch = self._watch()
            if watch is not None and watch.done():
                ended = None if watch.cancelled() or watch.exception() else watch.result()
                self._finish()
                if ended is None:
                    break
                return ended
            waiter = sub.waiter = asyncio.get_running_loop().create_future()
            try:
                if watch is None:
                    await waiter
                else:
                    await asyncio.wait((waiter, watch), return_when=asyncio.FIRST_COMPLETED)
            finally:
                sub.waiter = None
        self._finish()
        raise StopAsyncIteration

    def _watch(self) -> asyncio.Task[WorkflowEvent | None] | None:
        sub = self._sub
        if sub.watch is None and self._ends is not None:
            sub.watch = asyncio.get_running_loop().create_task(self._ends())
        return sub.watch

    async def aclose(self) -> None:
        """Stop listening; iterating again ends at once."""
        self._finish()

    def _finish(self) -> None:
        self._done = True
        self._bus._unsubscribe(self._sub)
