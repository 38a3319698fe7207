"""``ctx.on_signal``: handlers apply signals in arrival order, exactly once, recorded so
that replay applies them again at the same points."""

from __future__ import annotations

from typing import Any

import pytest

from pyweft import (
    DefinitionError,
    Engine,
    WorkflowContext,
    WorkflowFailedError,
    activity,
    workflow,
)
from support.backends import Backend
from support.poll import eventually


@activity
async def double(values: list[int]) -> list[int]:
    return [v * 2 for v in values]


@workflow
async def cart(ctx: WorkflowContext) -> dict[str, object]:
    items: list[object] = []
    removed: list[object] = []
    ctx.on_signal("add", items.append)

    @ctx.on_signal("remove")
    def remove(item: object) -> None:
        removed.append(item)
        items.remove(item)

    closed = False

    @ctx.on_signal("close")
    def close() -> None:
        nonlocal closed
        closed = True

    ctx.on_query("items", lambda: list(items))
    await ctx.wait_until(lambda: closed)
    return {"items": items, "removed": removed}


async def test_handlers_apply_signals_in_arrival_order_across_names(backend: Backend) -> None:
    async with backend.engine(workflows=[cart]) as engine:
        handle = await engine.start(cart, id="cart")
        for name, payload in [("add", 1), ("add", 2), ("remove", 1), ("add", 3), ("add", 1)]:
            await engine.signal("cart", name, payload)
        await engine.signal("cart", "close")
        assert await handle.result(timeout=5) == {"items": [2, 3, 1], "removed": [1]}
        # The handlers' applications are not steps: the journal holds only the wait.
        assert [s.kind for s in await handle.history()] == ["condition"]


async def test_signals_buffered_before_the_handler_is_registered_are_applied(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[cart]) as engine:
        await engine.start(cart, id="early", start_delay=60)
        await engine.signal("early", "add", "a")
        await engine.signal("early", "close")
    async with backend.engine(workflows=[cart]) as engine:
        backend.clock.advance(61)
        handle = engine.get_handle("early")
        assert await handle.result(timeout=5) == {"items": ["a"], "removed": []}


@workflow
async def tally(ctx: WorkflowContext, count: int) -> dict[str, object]:
    seen: list[int] = []
    ctx.on_signal("add", seen.append)
    ctx.on_query("seen", lambda: list(seen))
    await ctx.wait_until(lambda: len(seen) >= count // 2)
    half = await ctx.run(double, list(seen))
    await ctx.wait_until(lambda: len(seen) >= count)
    return {"half": half, "seen": seen}


async def test_a_restarted_engine_rebuilds_handler_state_by_replay(backend: Backend) -> None:
    async with backend.engine(workflows=[tally], activities=[double]) as engine:
        await engine.start(tally, 6, id="t")
        for i in range(3):
            await engine.signal("t", "add", i)

        async def past_half() -> bool:
            return len(await engine.history("t")) >= 2

        await eventually(past_half, what="the run passed its first wait")
        await engine.signal("t", "add", 3)
        await eventually(
            lambda: _seen(engine, "t", 4), what="the handler applied the fourth signal"
        )
    async with backend.engine(workflows=[tally], activities=[double]) as engine:
        assert await engine.query("t", "seen") == [0, 1, 2, 3]  # replayed, not re-applied
        for i in range(4, 6):
            await engine.signal("t", "add", i)
        result = await engine.get_handle("t").result(timeout=5)
    assert result == {"half": [0, 2, 4], "seen": [0, 1, 2, 3, 4, 5]}


async def _seen(engine: Engine, workflow_id: str, count: int) -> bool:
    return len(await engine.query(workflow_id, "seen")) >= count


@workflow
async def mixed(ctx: WorkflowContext) -> str:
    ctx.on_signal("go", lambda: None)
    try:
        await ctx.wait_for_signal("go")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


async def test_waiting_for_a_signal_that_has_a_handler_is_a_clear_error(backend: Backend) -> None:
    async with backend.engine(workflows=[mixed]) as engine:
        result = await (await engine.start(mixed)).result(timeout=5)
    assert result.startswith("WorkflowUsageError: signal 'go' has a handler (ctx.on_signal)")


@workflow
async def fragile(ctx: WorkflowContext) -> int:
    total = 0

    def add(n: int) -> None:
        nonlocal total
        if n < 0:
            raise ValueError("negative amounts are not accepted")
        total += n

    ctx.on_signal("add", add)
    await ctx.wait_until(lambda: total >= 100)
    return total


async def test_a_handler_that_raises_fails_the_run_with_its_error(backend: Backend) -> None:
    async with backend.engine(workflows=[fragile]) as engine:
        handle = await engine.start(fragile, id="f")
        await engine.signal("f", "add", 5)
        await engine.signal("f", "add", -1)
        with pytest.raises(WorkflowFailedError) as info:
            await handle.result(timeout=5)
    assert "the handler of signal 'add' raised ValueError: negative amounts" in str(info.value)


@workflow
async def async_handler(ctx: WorkflowContext) -> None:
    async def handler(payload: object) -> None:
        return None

    ctx.on_signal("x", handler)


async def test_an_async_signal_handler_is_refused_with_advice(backend: Backend) -> None:
    async with backend.engine(workflows=[async_handler]) as engine:
        with pytest.raises(WorkflowFailedError) as info:
            await (await engine.start(async_handler)).result(timeout=5)
    assert DefinitionError.__name__ in str(info.value)
    assert "ctx.on_update" in str(info.value)


async def test_an_evicted_run_rebuilds_its_handler_state_when_a_signal_brings_it_back(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[cart], max_cached_runs=0) as engine:
        handle = await engine.start(cart, id="ev")
        for item in ("a", "b", "c"):
            await engine.signal("ev", "add", item)
            # Parked and evicted after each one: the next signal replays it first.
            await eventually(lambda: _evicted(engine, "ev"), what="evicted")
        await engine.signal("ev", "remove", "b")
        await engine.signal("ev", "close")
        assert await handle.result(timeout=5) == {"items": ["a", "c"], "removed": ["b"]}


@workflow
async def waits_then_registers(ctx: WorkflowContext) -> str:
    try:
        await ctx.race(ctx.wait_for_signal("x"), ctx.memo("register", lambda: _register(ctx)))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def _register(ctx: WorkflowContext) -> None:
    ctx.on_signal("x", lambda: None)


async def test_registering_a_handler_for_a_name_a_wait_is_waiting_on_is_a_clear_error(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[waits_then_registers]) as engine:
        result = await (await engine.start(waits_then_registers)).result(timeout=5)
    assert result.startswith("WorkflowUsageError: signal 'x' has a handler")


def _evicted(engine: Engine, workflow_id: str) -> bool:
    core = engine._core
    return workflow_id in core.residency.evicted and workflow_id not in core.runs


@workflow
async def two_streams(ctx: WorkflowContext, each: int) -> dict[str, int]:
    counts = {"a": 0, "b": 0}
    order: list[str] = []

    def seen(name: str) -> Any:
        def apply(_: object) -> None:
            counts[name] += 1
            order.append(name)

        return apply

    ctx.on_signal("a", seen("a"))
    ctx.on_signal("b", seen("b"))
    await ctx.wait_until(lambda: counts["a"] + counts["b"] >= 2 * each)
    return counts


async def test_more_signals_than_one_batch_across_names_are_all_applied(
    backend: Backend,
) -> None:
    each = 300  # two names together hold more than one batch (512), neither alone does
    async with backend.engine(workflows=[two_streams], poll_interval=60) as engine:
        handle = await engine.start(two_streams, each, id="two", start_delay=1)
        for i in range(each):
            await engine.signal("two", "a", i)
            await engine.signal("two", "b", i)
        backend.clock.advance(2)
        assert await handle.result(timeout=10) == {"a": each, "b": each}
