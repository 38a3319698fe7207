"""Replay detects code changes that alter the order of durable steps."""

from __future__ import annotations

import contextlib

import pytest

from pyweft import NonDeterminismError, WorkflowContext, WorkflowFailedError, activity, workflow
from support.backends import Backend
from support.poll import eventually


@activity
async def a() -> str:
    return "a"


@activity
async def b() -> str:
    return "b"


def make_version(first: object, *, name: str = "changing") -> object:
    @workflow(name=name)
    async def changing(ctx: WorkflowContext) -> str:
        x = await ctx.run(first)  # type: ignore[arg-type]
        await ctx.sleep(10)
        return str(x)

    return changing


@workflow
async def steady(ctx: WorkflowContext) -> str:
    await ctx.sleep(10)
    return "steady"


async def test_with_fail_run_reordered_steps_fail_only_that_run_with_a_clear_message(
    backend: Backend,
) -> None:
    v1 = make_version(a)
    async with backend.engine(workflows=[v1, steady]) as engine:
        await engine.start(v1, id="victim")  # type: ignore[arg-type]
        await engine.start(steady, id="bystander")
        await eventually(lambda: backend.clock.pending_timers() == 2, what="both asleep")

    v2 = make_version(b)  # step 1 is now a different activity
    async with backend.engine(workflows=[v2, steady], on_nondeterminism="fail_run") as engine:
        with pytest.raises(WorkflowFailedError) as err:
            await engine.get_handle("victim").result(timeout=5)
        assert err.value.error_type == "NonDeterminismError"
        message = err.value.error_message
        assert "step 1" in message and "'a'" in message and "'b'" in message
        await eventually(lambda: backend.clock.pending_timers() == 1, what="bystander asleep")
        backend.clock.advance(10)
        assert await engine.get_handle("bystander").result(timeout=5) == "steady"
        info = await engine.describe("victim")
    assert info.status == "failed"
    assert info.error is not None and info.error.code == "NonDeterminismError"


async def test_with_fail_run_removed_steps_are_detected_when_the_workflow_returns(
    backend: Backend,
) -> None:
    @workflow(name="shrinking")
    async def long_version(ctx: WorkflowContext) -> str:
        await ctx.run(a)
        await ctx.run(b)
        await ctx.sleep(5)
        return "long"

    async with backend.engine(workflows=[long_version]) as engine:
        await engine.start(long_version, id="s")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")

    @workflow(name="shrinking")
    async def short_version(ctx: WorkflowContext) -> str:
        await ctx.run(a)
        return "short"

    async with backend.engine(workflows=[short_version], on_nondeterminism="fail_run") as engine:
        with pytest.raises(WorkflowFailedError) as err:
            await engine.get_handle("s").result(timeout=5)
    assert err.value.error_type == "NonDeterminismError"
    assert "step 2" in err.value.error_message


async def test_with_fail_run_catching_non_determinism_does_not_save_the_run(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[make_version(a, name="swallow")]) as engine:
        await engine.start("swallow", id="sw")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")

    @workflow(name="swallow")
    async def swallowing(ctx: WorkflowContext) -> str:
        with contextlib.suppress(NonDeterminismError):
            await ctx.run(b)
        return "pretend all is well"

    async with backend.engine(workflows=[swallowing], on_nondeterminism="fail_run") as engine:
        with pytest.raises(WorkflowFailedError) as err:
            await engine.get_handle("sw").result(timeout=5)
    assert err.value.error_type == "NonDeterminismError"
