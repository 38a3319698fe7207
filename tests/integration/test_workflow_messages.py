"""``ctx.signal_workflow`` and ``ctx.cancel_workflow``: messages between runs as durable
steps, sent once even when the sending run is replayed."""

from __future__ import annotations

import pytest

from pyweft import (
    WorkflowCancelledError,
    WorkflowContext,
    WorkflowUsageError,
    workflow,
)
from support.backends import Backend


@workflow
async def inbox(ctx: WorkflowContext, count: int) -> list[object]:
    got: list[object] = []
    ctx.on_signal("note", got.append)
    await ctx.wait_until(lambda: len(got) >= count)
    return got


@workflow
async def notifier(ctx: WorkflowContext, target: str) -> str:
    await ctx.signal_workflow(target, "note", {"from": ctx.workflow_id})
    await ctx.wait_for_signal("continue")  # a restart here replays the send
    await ctx.signal_workflow(target, "note", "second")
    return "sent"


async def test_a_signal_sent_by_a_workflow_arrives_once_across_a_restart(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[inbox, notifier]) as engine:
        receiver = await engine.start(inbox, 2, id="inbox")
        await engine.start(notifier, "inbox", id="sender")

        async def sent_once() -> bool:
            return len(await engine.history("sender")) >= 1

        from support.poll import eventually

        await eventually(sent_once, what="the first send was recorded")
    async with backend.engine(workflows=[inbox, notifier]) as engine:
        await engine.signal("sender", "continue")
        assert await engine.get_handle("sender").result(timeout=5) == "sent"
        assert await engine.get_handle("inbox").result(timeout=5) == [{"from": "sender"}, "second"]
        kinds = [s.kind for s in await engine.history("sender")]
    assert kinds == ["signal_workflow", "signal", "signal_workflow"]
    del receiver


@workflow
async def child_reporter(ctx: WorkflowContext) -> None:
    parent = ctx.info.parent_id
    assert parent is not None
    await ctx.signal_workflow(parent, "progress", 50)
    await ctx.signal_workflow(parent, "progress", 100)


@workflow
async def parent_waiting(ctx: WorkflowContext) -> list[int]:
    progress: list[int] = []
    ctx.on_signal("progress", progress.append)
    await ctx.start_child(child_reporter, parent_close_policy="abandon")
    await ctx.wait_until(lambda: progress[-1:] == [100])
    return progress


async def test_a_child_signals_its_parent(backend: Backend) -> None:
    async with backend.engine(workflows=[parent_waiting, child_reporter]) as engine:
        handle = await engine.start(parent_waiting)
        assert await handle.result(timeout=5) == [50, 100]


@workflow
async def to_nowhere(ctx: WorkflowContext) -> str:
    try:
        await ctx.signal_workflow("nobody", "x")
    except Exception as exc:
        return type(exc).__name__
    return "sent"


async def test_a_signal_to_an_unknown_run_raises_in_the_workflow(backend: Backend) -> None:
    async with backend.engine(workflows=[to_nowhere]) as engine:
        handle = await engine.start(to_nowhere, id="n")
        assert await handle.result(timeout=5) == "WorkflowNotFoundError"
        [step] = await handle.history()
    assert step.kind == "signal_workflow"
    assert step.status == "failed"


@workflow
async def parked(ctx: WorkflowContext) -> str:
    await ctx.wait_for_signal("never")
    return "woke"


@workflow
async def canceller(ctx: WorkflowContext, target: str) -> str:
    await ctx.cancel_workflow(target)
    await ctx.cancel_workflow(target)  # already cancelled: asking again is harmless
    return "asked"


async def test_a_workflow_cancels_another(backend: Backend) -> None:
    async with backend.engine(workflows=[parked, canceller]) as engine:
        victim = await engine.start(parked, id="victim")
        done = await engine.start(canceller, "victim")
        assert await done.result(timeout=5) == "asked"
        with pytest.raises(WorkflowCancelledError):
            await victim.result(timeout=5)


@workflow
async def self_cancel(ctx: WorkflowContext) -> None:
    await ctx.cancel_workflow(ctx.workflow_id)


async def test_a_workflow_cannot_cancel_itself_with_cancel_workflow(backend: Backend) -> None:
    async with backend.engine(workflows=[self_cancel]) as engine:
        handle = await engine.start(self_cancel)
        with pytest.raises(Exception) as info:
            await handle.result(timeout=5)
    assert WorkflowUsageError.__name__ in str(info.value)
