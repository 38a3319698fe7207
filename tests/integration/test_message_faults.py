"""Messages under storage faults: applied once, in order, and never lost.

A commit that fails (or whose reply is lost, so it may have landed) while a
signal is buffered or an update is applied must neither reorder signals nor
apply an update twice in memory: the run is torn down and replayed from what
the store holds.
"""

from __future__ import annotations

import pytest

from pyweft import Engine, MemoryStorage, StorageError, WorkflowContext, workflow
from pyweft.storage.base import Op
from pyweft.testing import FaultyStorage
from support.poll import eventually


@workflow
async def collect(ctx: WorkflowContext) -> list[int]:
    return [await ctx.wait_for_signal("item") for _ in range(3)]


@workflow
async def adder(ctx: WorkflowContext) -> int:
    total = 0

    def add(n: int) -> int:
        nonlocal total
        total += n
        return total

    ctx.on_update("add", add)
    await ctx.wait_for_signal("stop")
    return total


def _writes(fragment: str):  # type: ignore[no-untyped-def]
    def match(ops: list[Op]) -> bool:
        return any(fragment in op.key for op in ops)

    return match


async def test_a_signal_whose_commit_reply_was_lost_is_still_consumed_in_order() -> None:
    faults = FaultyStorage(MemoryStorage())
    async with Engine(faults, workflows=[collect]) as engine:
        handle = await engine.start(collect, id="c")
        await eventually(lambda: engine.is_running_here("c"))
        faults.fail_nth_write(match=_writes(":item:"), outcome_unknown=True)
        with pytest.raises(StorageError):
            await engine.signal("c", "item", 0, signal_id="s0")
        await engine.signal("c", "item", 0, signal_id="s0")  # the resend is a no-op: it landed
        await engine.signal("c", "item", 1, signal_id="s1")
        await engine.signal("c", "item", 2, signal_id="s2")
        assert await handle.result(timeout=10) == [0, 1, 2]


@pytest.mark.parametrize("outcome_unknown", [False, True], ids=["failed", "reply-lost"])
async def test_an_update_whose_commit_fails_is_applied_once(outcome_unknown: bool) -> None:
    faults = FaultyStorage(MemoryStorage())
    async with Engine(faults, workflows=[adder]) as engine:
        handle = await engine.start(adder, id="a")
        await eventually(lambda: engine.is_running_here("a"))
        faults.fail_nth_write(match=_writes(":u:"), outcome_unknown=outcome_unknown)
        assert await engine.update("a", "add", 5, timeout=10) == 5
        assert await engine.update("a", "add", 1, timeout=10) == 6
        await engine.signal("a", "stop")
        assert await handle.result(timeout=10) == 6
        assert engine.stats().storage_failures == 1
