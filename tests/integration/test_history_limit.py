"""Runaway runs: a history limit per run ends a loop that never stops."""

from __future__ import annotations

import contextlib
from collections import Counter

import pytest

from pyweft import (
    ConfigurationError,
    DefinitionError,
    Engine,
    MemoryStorage,
    VirtualClock,
    WorkflowContext,
    WorkflowFailedError,
    activity,
    workflow,
)
from support.poll import eventually

calls: Counter[str] = Counter()


@activity
async def tick(i: int) -> int:
    calls["tick"] += 1
    return i


@workflow
async def forever(ctx: WorkflowContext) -> None:
    i = 0
    while True:
        # Swallowing every error must not let the loop past the limit.
        with contextlib.suppress(Exception):
            i = await ctx.run(tick, i + 1)


@workflow
async def ticks_then_sleep(ctx: WorkflowContext, n: int) -> int:
    for i in range(n):
        await ctx.run(tick, i)
    await ctx.sleep("1h")
    return n


async def test_a_loop_that_never_ends_fails_at_the_history_limit_with_a_warning_first() -> None:
    calls.clear()
    async with Engine("memory://", workflows=[forever], max_history_steps=50) as engine:
        events = engine.events()
        handle = await engine.start(forever, id="loop")
        with pytest.raises(WorkflowFailedError) as failed:
            await handle.result(timeout=10)
        assert failed.value.error_type == "HistoryLimitError"
        assert "continue_as_new" in str(failed.value)
        warnings = []
        async for event in events:
            if event.kind == "warning":
                warnings.append(event)
            if event.kind == "failed":
                break
        assert len(warnings) == 1 and "40 of its 50 steps" in warnings[0].data["message"]
    assert calls["tick"] == 50


async def test_a_run_past_a_lowered_limit_fails_at_recovery_without_replaying() -> None:
    calls.clear()
    storage, clock = MemoryStorage(), VirtualClock()
    async with Engine(storage, workflows=[ticks_then_sleep], clock=clock) as engine:
        await engine.start(ticks_then_sleep, 30, id="long")
        await eventually(lambda: clock.pending_timers() > 0, what="the run to reach its sleep")
    calls.clear()
    async with Engine(
        storage, workflows=[ticks_then_sleep], clock=clock, max_history_steps=20
    ) as engine:
        with pytest.raises(WorkflowFailedError) as failed:
            await engine.get_handle("long").result(timeout=10)
        assert failed.value.error_type == "HistoryLimitError"
    assert calls["tick"] == 0  # nothing replayed or run


def test_the_history_limit_must_be_a_positive_int() -> None:
    for bad in (0, -1, 2.5, "10"):
        with pytest.raises(ConfigurationError, match="max_history_steps"):
            Engine("memory://", max_history_steps=bad)  # type: ignore[arg-type]


@workflow(max_history_steps=10)
async def short_leash(ctx: WorkflowContext) -> None:
    i = 0
    while True:
        i = await ctx.run(tick, i + 1)


async def test_a_workflow_may_set_its_own_history_limit() -> None:
    calls.clear()
    async with Engine("memory://", workflows=[short_leash]) as engine:
        with pytest.raises(WorkflowFailedError) as failed:
            await (await engine.start(short_leash)).result(timeout=10)
        assert failed.value.error_type == "HistoryLimitError"
    assert calls["tick"] == 10


def test_a_workflow_history_limit_must_be_a_positive_int() -> None:
    for bad in (0, -5, 1.5):
        with pytest.raises(DefinitionError, match="max_history_steps"):
            workflow(max_history_steps=bad)  # type: ignore[arg-type]
