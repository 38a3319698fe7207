"""Coalescing on an event loop: requests made while others are in flight go together.

A store whose every call is a network round trip (PostgreSQL) spends most of a
small call's cost on things that do not grow with it: the round trip, the
transaction and its commit, and on the client the connection hand-out and the
driver's send and wait. :class:`Coalescer` lets up to ``max_inflight`` groups be
in flight at once; a request that finds a free slot and nobody queued is sent at
once, on its own, in its caller's task (so a lone sequential caller pays nothing
extra). A request that finds every slot busy queues, and the next free slot sends
everything queued (up to ``max_group`` items) as one group. Under load, groups
grow by themselves; when idle, nothing waits.

The sender decides what a group means. For PostgreSQL writes it is one
transaction (group commit) in which each batch's conditions are checked before
its writes, so a batch whose condition fails writes nothing and the others are
unaffected; for reads, one statement for many keys. An error for the whole group
(a lost connection, say) fails every request in it with that error.

A caller cancelled while its item is still queued takes the item out (it is never
sent). Once sent, an item's group runs to its end in its own task, whatever happens
to the caller, and the result is dropped if nobody waits for it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Coalescer(Generic[T, R]):
    """Coalesce concurrent submissions into groups handed to ``send`` together.

    ``send(items)`` returns one result per item, in order. Use one instance from
    one event loop.
    """

    def __init__(
        self,
        send: Callable[[Sequence[T]], Awaitable[Sequence[R]]],
        *,
        max_inflight: int = 2,
        max_group: int = 128,
    ) -> None:
        if max_inflight < 1 or max_group < 1:
            raise ValueError("max_inflight and max_group must be >= 1")
        self._send = send
        self._max_inflight = max_inflight
        self._max_group = max_group
        self._inflight = 0
        self._queue: deque[tuple[T, asyncio.Future[R]]] = deque()
        self._flushers: set[asyncio.Task[None]] = set()
        self.groups_sent = 0
        """How many groups went to ``send`` (lets tests and benchmarks see grouping)."""

    @property
    def inflight(self) -> int:
        return self._inflight

    @property
    def queued(self) -> int:
        """Items waiting for a free slot (they go with the next group)."""
        return len(self._queue)

    async def submit(self, item: T) -> R:
        """Send ``item`` (alone, or in the next group) and return its result."""
        if self._inflight < self._max_inflight and not self._queue:
            self._inflight += 1
            self.groups_sent += 1
            try:
                results = await self._send((item,))
            finally:
                self._inflight -= 1
                self._kick()
            return results[0]
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        self._kick()
        # Cancelling this await cancels the future: a flusher skips it if still
        # queued, and drops its result if its group was already sent.
        return await future

    def _kick(self) -> None:
        """Start a flusher for each free slot while something is queued."""
        while self._queue and self._inflight < self._max_inflight:
            self._inflight += 1
            task = asyncio.get_running_loop().create_task(self._flush())
            self._flushers.add(task)
            task.add_done_callback(self._flushers.discard)

    async def _flush(self) -> None:
        try:
            while True:
                group = self._take()
                if not group:
                    return
                self.groups_sent += 1
                try:
                    results = await self._send([item for item, _ in group])
                except Exception as exc:
                    for _, future in group:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                except BaseException:
                    for _, future in group:  # the loop is going away: so are the callers
                        future.cancel()
                    raise
                for (_, future), result in zip(group, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:
            self._inflight -= 1
            self._kick()

    def _take(self) -> list[tuple[T, asyncio.Future[R]]]:
        group: list[tuple[T, asyncio.Future[R]]] = []
        while self._queue and len(group) < self._max_group:
            entry = self._queue.popleft()
            if not entry[1].done():  # a cancelled caller's item is never sent
                group.append(entry)
        return group
