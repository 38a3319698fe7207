"""Live event feeds: one journal of this engine's events, read by SSE and WebSocket.

The engine's ``events()`` are in-process and carry no id, so the server keeps its
own journal: every event it sees gets the next sequence number, and the last
``capacity`` events are kept for replay. A feed's cursor is ``<epoch>-<seq>``; the
epoch changes whenever the server restarts, so a cursor from an earlier server is
recognised as such. Resuming from a cursor still in the journal (``Last-Event-ID``
or ``?cursor=``) sends exactly the events after it: none lost, none repeated. A
cursor older than the journal, or from another epoch, first gets a ``gap`` message
saying events were missed, then everything the journal still holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from pyweft import Engine, InvalidArgumentError, WorkflowEvent
from pyweft.client.wire import event_to_json


@dataclass(frozen=True, slots=True)
class FeedFilter:
    workflow_id: str | None = None
    workflow_type: str | None = None
    kinds: frozenset[str] = frozenset()

    def matches(self, event: WorkflowEvent) -> bool:
        return (
            (self.workflow_id is None or event.workflow_id == self.workflow_id)
            and (self.workflow_type is None or event.workflow_type == self.workflow_type)
            and (not self.kinds or event.kind in self.kinds)
        )


@dataclass(frozen=True, slots=True)
class FeedItem:
    """One message of a feed: an event (with its cursor), a gap notice, or a ping."""

    kind: str  # "event", "gap", "ping"
    cursor: str | None = None
    data: dict[str, Any] | None = None


class EventJournal:
    def __init__(self, engine: Engine, capacity: int = 10_000) -> None:
        self.epoch = secrets.token_hex(4)
        self._engine = engine
        self._events: deque[tuple[int, WorkflowEvent]] = deque(maxlen=capacity)
        self._seq = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._ready = asyncio.Event()

    async def start(self) -> None:
        stream = self._engine.events()
        self._task = asyncio.create_task(self._pump(stream), name="pyweft-server-journal")
        await asyncio.sleep(0)

    async def _pump(self, stream: AsyncIterator[WorkflowEvent]) -> None:
        async for event in stream:
            self.append(event)

    def append(self, event: WorkflowEvent) -> None:
        self._seq += 1
        self._events.append((self._seq, event))
        self._changed.set()
        self._changed = asyncio.Event()

    def end_feeds(self) -> None:
        """End every feed now (they return after what they are sending): the first step
        of a graceful shutdown, so open streams do not hold the server up."""
        self._closed = True
        self._changed.set()

    async def close(self) -> None:
        self.end_feeds()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def now(self) -> str:
        """The cursor of the latest event: following from it gets everything after now."""
        return self.cursor(self._seq)

    def cursor(self, seq: int) -> str:
        return f"{self.epoch}-{seq}"

    def parse_cursor(self, cursor: str | None) -> tuple[int, bool]:
        """The sequence to resume after, and whether events may have been missed."""
        if cursor is None or cursor == "":
            return self._seq, False  # from now on
        epoch, _, seq_text = cursor.partition("-")
        if not seq_text.isdigit() or len(seq_text) > 18:
            raise InvalidArgumentError(
                f"event cursor {cursor!r} is not one this server issued (expected <epoch>-<n>)"
            )
        if epoch != self.epoch:
            return 0, True
        seq = int(seq_text)
        if seq == 0:
            return 0, False  # "everything still held" (a run's own feed starts here)
        if seq > self._seq:
            raise InvalidArgumentError(f"event cursor {cursor!r} is ahead of this server's feed")
        oldest = self._events[0][0] if self._events else self._seq + 1
        return seq, seq < oldest - 1

    def after(self, seq: int, flt: FeedFilter) -> tuple[list[tuple[int, WorkflowEvent]], int]:
        """Matching events after ``seq``, and the sequence read up to."""
        out = [(s, e) for s, e in self._events if s > seq and flt.matches(e)]
        return out, self._seq

    async def follow(
        self,
        flt: FeedFilter,
        cursor: str | None,
        *,
        ping_s: float,
        until: Callable[[WorkflowEvent], bool] | None = None,
    ) -> AsyncIterator[FeedItem]:
        seq, gap = self.parse_cursor(cursor)
        if gap:
            yield FeedItem(kind="gap", data={"reason": "events before the journal were dropped"})
        while not self._closed:
            changed = self._changed
            items, seq = self.after(seq, flt)
            for s, event in items:
                yield FeedItem(kind="event", cursor=self.cursor(s), data=event_to_json(event))
                if until is not None and until(event):
                    return
            if items:
                continue
            try:
                await asyncio.wait_for(changed.wait(), timeout=ping_s)
            except TimeoutError:
                yield FeedItem(kind="ping")


class StreamSlots:
    """At most ``per_run`` open feeds of one run (per-run SSE and WebSocket watches, and
    fleet feeds filtered to one run), so one run cannot absorb the server's sockets."""

    def __init__(self, per_run: int) -> None:
        self.per_run = per_run
        self._open: dict[str, int] = {}

    def take(self, workflow_id: str | None) -> bool:
        if workflow_id is None:
            return True
        count = self._open.get(workflow_id, 0)
        if count >= self.per_run:
            return False
        self._open[workflow_id] = count + 1
        return True

    def release(self, workflow_id: str | None) -> None:
        if workflow_id is None:
            return
        count = self._open.get(workflow_id, 0) - 1
        if count > 0:
            self._open[workflow_id] = count
        else:
            self._open.pop(workflow_id, None)
