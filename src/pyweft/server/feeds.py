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
import itertools
import secrets
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from pyweft import Engine, InvalidArgumentError, WorkflowEvent
from pyweft.client.wire import dumps, event_to_json

_DROPPED = "events before the journal were dropped"


@dataclass(frozen=True, slots=True)
class FeedFilter:
    workflow_id: str | None = None
    workflow_type: str | None = None
    kinds: frozenset[str] = frozenset()

    @property
    def everything(self) -> bool:
        return self.workflow_id is None and self.workflow_type is None and not self.kinds

    def matches(self, event: WorkflowEvent) -> bool:
        return (
            (self.workflow_id is None or event.workflow_id == self.workflow_id)
            and (self.workflow_type is None or event.workflow_type == self.workflow_type)
            and (not self.kinds or event.kind in self.kinds)
        )


@dataclass(frozen=True, slots=True)
class FeedItem:
    """One message of a feed: an event (with its cursor), a gap notice, or a ping.

    ``sse`` is the event's whole server-sent-events frame, encoded once by the journal
    and shared by every feed that sends it."""

    kind: str  # "event", "gap", "ping"
    cursor: str | None = None
    data: dict[str, Any] | None = None
    sse: bytes | None = None


class _Entry:
    """A journalled event; its feed item (JSON and SSE frame) is built once, on first use,
    however many feeds send it."""

    __slots__ = ("event", "item", "seq")

    def __init__(self, seq: int, event: WorkflowEvent) -> None:
        self.seq = seq
        self.event = event
        self.item: FeedItem | None = None

    def feed_item(self, epoch: str) -> FeedItem:
        if self.item is None:
            cursor = f"{epoch}-{self.seq}"
            data = event_to_json(self.event)
            frame = b"event: event\nid: %s\ndata: %s\n\n" % (cursor.encode(), dumps(data))
            self.item = FeedItem(kind="event", cursor=cursor, data=data, sse=frame)
        return self.item


class EventJournal:
    """Numbers and keeps this engine's events, and wakes the feeds that follow them.

    While events flow, feeds are woken once per interval (right away after a quiet
    spell), and each sends everything new as one write instead of waking, and writing
    to its socket, once per event. The interval grows with the number of open feeds
    (``feeds / max_wakeups_per_s``, from 2 ms up to ``max_flush_s``), so a busy server
    does about ``max_wakeups_per_s`` feed wake-ups per second however many feeds are
    open, and a handful of feeds still hear of an event within milliseconds.
    """

    def __init__(
        self,
        engine: Engine,
        capacity: int = 10_000,
        *,
        max_wakeups_per_s: float = 20_000.0,
        max_flush_s: float = 0.05,
    ) -> None:
        self.epoch = secrets.token_hex(4)
        self._engine = engine
        self._events: deque[_Entry] = deque(maxlen=capacity)
        self._seq = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._wakeups_per_s = max_wakeups_per_s
        self._max_flush_s = max_flush_s
        self._feeds = 0  # feeds following now (they set the wake-up interval)
        self._last_wake = float("-inf")
        self._wake_pending: asyncio.TimerHandle | None = None
        # SSE bytes of every event from one sequence up to the newest, shared by the
        # unfiltered feeds that are at that sequence (after a wake-up, usually all).
        self._spans: dict[int, bytes] = {}
        self._spans_upto = 0

    async def start(self) -> None:
        stream = self._engine.events()
        self._task = asyncio.create_task(self._pump(stream), name="pyweft-server-journal")
        await asyncio.sleep(0)

    async def _pump(self, stream: AsyncIterator[WorkflowEvent]) -> None:
        async for event in stream:
            self.append(event)

    def append(self, event: WorkflowEvent) -> None:
        self._seq += 1
        self._events.append(_Entry(self._seq, event))
        if self._wake_pending is not None:
            return  # the feeds are woken at the end of this interval, with this event too
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._wake()
            return
        now = loop.time()
        interval = min(self._max_flush_s, max(0.002, self._feeds / self._wakeups_per_s))
        if now - self._last_wake >= interval:
            self._wake(now)
        else:
            self._wake_pending = loop.call_at(self._last_wake + interval, self._wake)

    def _wake(self, now: float | None = None) -> None:
        self._wake_pending = None
        if now is None:
            try:
                now = asyncio.get_running_loop().time()
            except RuntimeError:
                now = float("-inf")
        self._last_wake = now
        self._changed.set()
        self._changed = asyncio.Event()

    def end_feeds(self) -> None:
        """End every feed now (they return after what they are sending): the first step
        of a graceful shutdown, so open streams do not hold the server up."""
        self._closed = True
        if self._wake_pending is not None:
            self._wake_pending.cancel()
            self._wake_pending = None
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
        oldest = self._events[0].seq if self._events else self._seq + 1
        return seq, seq < oldest - 1

    def _newer(self, seq: int) -> list[_Entry]:
        # Sequence numbers are consecutive, so the entries after `seq` are the last
        # `self._seq - seq` ones: read from the right end, never the whole journal.
        count = min(self._seq - seq, len(self._events))
        if count <= 0:
            return []
        if count == len(self._events):
            return list(self._events)
        newest_first = list(itertools.islice(reversed(self._events), count))
        newest_first.reverse()
        return newest_first

    def after(self, seq: int, flt: FeedFilter) -> tuple[list[tuple[int, WorkflowEvent]], int]:
        """Matching events after ``seq``, and the sequence read up to."""
        entries = self._newer(seq)
        return [(e.seq, e.event) for e in entries if flt.matches(e.event)], self._seq

    async def follow_batches(
        self,
        flt: FeedFilter,
        cursor: str | None,
        *,
        ping_s: float,
        until: Callable[[WorkflowEvent], bool] | None = None,
    ) -> AsyncIterator[list[FeedItem]]:
        """The feed as batches: every item ready at one wake-up, to send in one write."""
        seq, gap = self.parse_cursor(cursor)
        if gap:
            yield [FeedItem(kind="gap", data={"reason": _DROPPED})]
        everything = flt.everything
        self._feeds += 1
        try:
            async for batch in self._batches(flt, seq, everything, ping_s, until):
                yield batch
        finally:
            self._feeds -= 1

    async def _batches(
        self,
        flt: FeedFilter,
        seq: int,
        everything: bool,
        ping_s: float,
        until: Callable[[WorkflowEvent], bool] | None,
    ) -> AsyncIterator[list[FeedItem]]:
        while not self._closed:
            changed = self._changed
            entries = self._newer(seq)
            seq = self._seq
            batch: list[FeedItem] = []
            for entry in entries:
                if not everything and not flt.matches(entry.event):
                    continue
                batch.append(entry.feed_item(self.epoch))
                if until is not None and until(entry.event):
                    yield batch
                    return
            if batch:
                yield batch
                continue
            if entries:
                continue  # none matched: look again before sleeping
            try:
                async with asyncio.timeout(ping_s):
                    await changed.wait()
            except TimeoutError:
                yield [FeedItem(kind="ping")]

    def _span(self, seq: int) -> bytes:
        if self._spans_upto != self._seq:
            self._spans = {}
            self._spans_upto = self._seq
        blob = self._spans.get(seq)
        if blob is None:
            blob = b"".join(e.feed_item(self.epoch).sse or b"" for e in self._newer(seq))
            self._spans[seq] = blob
        return blob

    async def follow_sse(
        self,
        flt: FeedFilter,
        cursor: str | None,
        *,
        ping_s: float,
        until: Callable[[WorkflowEvent], bool] | None = None,
        encode: Callable[[FeedItem], bytes],
    ) -> AsyncIterator[bytes]:
        """The feed as SSE bytes, one write per wake-up. An unfiltered feed (the fleet
        feed without parameters) shares one encoded span with every feed at the same
        sequence, so a wake-up costs each such feed a lookup, not a pass over events."""
        if until is not None or not flt.everything:
            async for batch in self.follow_batches(flt, cursor, ping_s=ping_s, until=until):
                yield b"".join(item.sse or encode(item) for item in batch)
            return
        seq, missed = self.parse_cursor(cursor)
        if missed:
            yield encode(FeedItem(kind="gap", data={"reason": _DROPPED}))
        self._feeds += 1
        try:
            async for chunk in self._spans_from(seq, ping_s, encode):
                yield chunk
        finally:
            self._feeds -= 1

    async def _spans_from(
        self, seq: int, ping_s: float, encode: Callable[[FeedItem], bytes]
    ) -> AsyncIterator[bytes]:
        while not self._closed:
            changed = self._changed
            if self._seq > seq:
                blob = self._span(seq)
                seq = self._seq
                yield blob
                continue
            try:
                async with asyncio.timeout(ping_s):
                    await changed.wait()
            except TimeoutError:
                yield encode(FeedItem(kind="ping"))

    async def follow(
        self,
        flt: FeedFilter,
        cursor: str | None,
        *,
        ping_s: float,
        until: Callable[[WorkflowEvent], bool] | None = None,
    ) -> AsyncIterator[FeedItem]:
        async for batch in self.follow_batches(flt, cursor, ping_s=ping_s, until=until):
            for item in batch:
                yield item


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
