"""Queries on finished runs are answered by replaying the journal (no activity runs,
nothing is written); a query right after ``start()`` waits for the handler."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from pyweft import (
    Engine,
    QueryNotFoundError,
    QueryUnavailableError,
    WorkflowContext,
    activity,
    workflow,
)
from pyweft.engine.replay import keys
from pyweft.storage.base import Op, Put
from support.backends import Backend
from support.gates import GatedStore, open_store
from support.poll import eventually

calls: list[str] = []


@activity
async def price(item: str) -> int:
    calls.append(item)
    return len(item)


@workflow
async def basket(ctx: WorkflowContext, fail: bool) -> int:
    items: list[str] = []
    prices: list[int] = []
    ctx.on_signal("add", items.append)
    ctx.on_query("summary", lambda: {"items": list(items), "prices": list(prices)})
    await ctx.wait_until(lambda: len(items) >= 2)
    for item in items:
        prices.append(await ctx.run(price, item))
    if fail:
        raise ValueError("the basket was rejected")
    return sum(prices)


@pytest.mark.parametrize("fail", [False, True])
async def test_a_finished_run_is_queried_by_replaying_its_journal(
    backend: Backend, fail: bool
) -> None:
    async with backend.engine(workflows=[basket], activities=[price]) as engine:
        handle = await engine.start(basket, fail, id="b")
        await engine.signal("b", "add", "tea")
        await engine.signal("b", "add", "cake")
        if fail:
            with pytest.raises(Exception, match="rejected"):
                await handle.result(timeout=5)
        else:
            assert await handle.result(timeout=5) == 7
    calls.clear()
    # Another engine (a fresh process, as far as the run is concerned) answers it.
    async with backend.engine(workflows=[basket], activities=[price], recover=False) as engine:
        before = await engine.storage.scan("")
        summary = await engine.query("b", "summary")
        assert await engine.storage.scan("") == before  # nothing written
        with pytest.raises(QueryNotFoundError):
            await engine.query("b", "nope")
    assert summary == {"items": ["tea", "cake"], "prices": [3, 4]}
    assert calls == []  # no activity ran again


@workflow
async def stopped(ctx: WorkflowContext) -> None:
    seen: list[object] = []
    ctx.on_signal("x", seen.append)
    ctx.on_query("seen", lambda: list(seen))
    await ctx.wait_for_signal("never")


async def test_a_cancelled_run_is_queried_at_the_point_it_stopped(backend: Backend) -> None:
    async with backend.engine(workflows=[stopped]) as engine:
        handle = await engine.start(stopped, id="s")
        await engine.signal("s", "x", 1)

        async def applied() -> bool:
            return bool(await engine.query("s", "seen") == [1])

        await eventually(applied, what="the handler applied the signal")
        await handle.cancel()
        with pytest.raises(Exception):  # noqa: B017 - cancelled, whatever the error type
            await handle.result(timeout=5)
        assert (await handle.describe()).status == "cancelled"
        assert await engine.query("s", "seen") == [1]


def _records_a_handled_signal(ops: Sequence[Op]) -> bool:
    return any(
        isinstance(op, Put) and op.key.startswith(keys.applied_update_prefix("h")) for op in ops
    )


async def test_a_cancel_while_a_handled_signal_is_being_recorded_keeps_it(
    backend: Backend,
) -> None:
    # The handler has run (memory shows the signal) and its record is on its way to the
    # store when the cancel lands: the record must still be written, so the finished run
    # replays to what a query of the live run saw.
    store = GatedStore(open_store(backend))
    async with Engine(
        store,  # type: ignore[arg-type]
        workflows=[stopped],
        clock=backend.clock,
        ownership="none",
    ) as engine:
        handle = await engine.start(stopped, id="h")
        recording = store.hold(_records_a_handled_signal, after=False)
        await engine.signal("h", "x", 1)
        await recording.reached.wait()
        cancelling = asyncio.ensure_future(handle.cancel())
        await asyncio.sleep(0.05)  # the cancel reaches the run while its record waits
        recording.release.set()
        await cancelling
        with pytest.raises(Exception):  # noqa: B017 - cancelled, whatever the error type
            await handle.result(timeout=5)
        assert (await handle.describe()).status == "cancelled"
        assert await engine.query("h", "seen") == [1]


@workflow
async def tally(ctx: WorkflowContext) -> None:
    total: list[int] = []

    def add(n: int) -> int:
        total.append(n)
        return sum(total)

    ctx.on_update("add", add)
    ctx.on_query("total", lambda: sum(total))
    await ctx.wait_for_signal("never")


async def test_a_cancel_while_an_update_is_being_recorded_still_answers_it(
    backend: Backend,
) -> None:
    store = GatedStore(open_store(backend))
    async with Engine(
        store,  # type: ignore[arg-type]
        workflows=[tally],
        clock=backend.clock,
        ownership="none",
    ) as engine:
        handle = await engine.start(tally, id="h")
        recording = store.hold(_records_a_handled_signal, after=False)
        updating = asyncio.ensure_future(engine.update("h", "add", 5, timeout=10))
        await recording.reached.wait()
        cancelling = asyncio.ensure_future(handle.cancel())
        await asyncio.sleep(0.05)  # the cancel reaches the run while the answer waits
        recording.release.set()
        await cancelling
        assert await updating == 5  # answered, though the run was cancelled right after
        with pytest.raises(Exception):  # noqa: B017 - cancelled, whatever the error type
            await handle.result(timeout=5)
        assert (await handle.describe()).status == "cancelled"
        assert await engine.query("h", "total") == 5


async def test_a_finished_run_whose_code_is_not_registered_is_unavailable(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[basket], activities=[price]) as engine:
        handle = await engine.start(basket, False, id="gone")
        await engine.signal("gone", "add", "a")
        await engine.signal("gone", "add", "b")
        await handle.result(timeout=5)
    async with backend.engine(workflows=[stopped]) as engine:
        with pytest.raises(QueryUnavailableError, match="not registered here"):
            await engine.query("gone", "summary")


@workflow
async def slow_to_register(ctx: WorkflowContext) -> None:
    for _ in range(200):  # plain code before the first step: the handler comes late
        await ctx.memo("noop", lambda: 1)
    ctx.on_query("ready", lambda: True)
    await ctx.wait_for_signal("never")


async def test_a_query_right_after_start_waits_for_the_handler(backend: Backend) -> None:
    async with backend.engine(workflows=[slow_to_register]) as engine:
        handle = await engine.start(slow_to_register)
        assert await handle.query("ready") is True
        with pytest.raises(QueryNotFoundError):
            await handle.query("never-registered")  # parked now: no waiting
