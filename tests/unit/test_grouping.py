"""Coalescer: lone writes go at once, concurrent ones go together, failures reach everyone."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from pyweft.storage.grouping import Coalescer


class Sender:
    """Records each group; holds every send until ``gate`` opens."""

    def __init__(self) -> None:
        self.groups: list[list[int]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: Exception | None = None
        self.busy = 0
        self.most_busy = 0

    async def __call__(self, items: Sequence[int]) -> list[int]:
        self.groups.append(list(items))
        self.busy += 1
        self.most_busy = max(self.most_busy, self.busy)
        try:
            await self.gate.wait()
            if self.fail is not None:
                raise self.fail
            return [item * 10 for item in items]
        finally:
            self.busy -= 1


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_lone_write_is_sent_at_once_on_its_own() -> None:
    send = Sender()
    group = Coalescer(send, max_inflight=1)
    assert await group.submit(1) == 10
    assert await group.submit(2) == 20
    assert send.groups == [[1], [2]]
    assert group.groups_sent == 2


async def test_writes_queued_behind_a_busy_slot_go_together_in_order() -> None:
    send = Sender()
    send.gate.clear()
    group = Coalescer(send, max_inflight=1)
    first = asyncio.ensure_future(group.submit(1))
    await settle()
    rest = [asyncio.ensure_future(group.submit(i)) for i in range(2, 7)]
    await settle()
    assert send.groups == [[1]]  # the others wait for the slot
    send.gate.set()
    assert await first == 10
    assert await asyncio.gather(*rest) == [20, 30, 40, 50, 60]
    assert send.groups == [[1], [2, 3, 4, 5, 6]]


async def test_groups_are_capped_and_inflight_sends_are_bounded() -> None:
    send = Sender()
    send.gate.clear()
    group = Coalescer(send, max_inflight=2, max_group=3)
    calls = [asyncio.ensure_future(group.submit(i)) for i in range(10)]
    await settle()
    assert send.most_busy == 2
    send.gate.set()
    assert await asyncio.gather(*calls) == [i * 10 for i in range(10)]
    assert send.most_busy == 2
    assert max(len(g) for g in send.groups) == 3
    assert sorted(i for g in send.groups for i in g) == list(range(10))


async def test_a_failed_send_fails_every_write_of_its_group_and_the_next_group_goes_on() -> None:
    send = Sender()
    send.gate.clear()
    group = Coalescer(send, max_inflight=1)
    first = asyncio.ensure_future(group.submit(1))
    await settle()
    queued = [asyncio.ensure_future(group.submit(i)) for i in (2, 3)]
    await settle()
    send.fail = RuntimeError("connection lost")
    send.gate.set()
    for call in (first, *queued):
        with pytest.raises(RuntimeError, match="connection lost"):
            await call
    send.fail = None
    assert await group.submit(4) == 40
    assert group.inflight == 0


async def test_a_caller_cancelled_while_queued_is_never_sent() -> None:
    send = Sender()
    send.gate.clear()
    group = Coalescer(send, max_inflight=1)
    first = asyncio.ensure_future(group.submit(1))
    await settle()
    dropped = asyncio.ensure_future(group.submit(2))
    kept = asyncio.ensure_future(group.submit(3))
    await settle()
    dropped.cancel()
    await settle()
    send.gate.set()
    assert await first == 10 and await kept == 30
    assert dropped.cancelled()
    assert send.groups == [[1], [3]]


async def test_a_caller_cancelled_after_its_group_was_sent_does_not_stop_the_others() -> None:
    send = Sender()
    send.gate.clear()
    group = Coalescer(send, max_inflight=1)
    first = asyncio.ensure_future(group.submit(1))
    await settle()
    a, b = asyncio.ensure_future(group.submit(2)), asyncio.ensure_future(group.submit(3))
    await settle()
    send.gate.set()
    await first
    await asyncio.sleep(0)  # the flusher has taken [2, 3]
    a.cancel()
    assert await b == 30
    assert send.groups == [[1], [2, 3]]


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Coalescer(Sender(), max_inflight=0)
    with pytest.raises(ValueError):
        Coalescer(Sender(), max_group=0)
