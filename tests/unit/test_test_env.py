"""pyweft.testing.TestEnv: time skipping, advance, mocks, restarts and wait_for."""

from __future__ import annotations

import pytest

from pyweft import (
    ActivityError,
    InvalidArgumentError,
    RetryPolicy,
    WaitTimeoutError,
    WorkflowContext,
    activity,
    workflow,
)
from pyweft.testing import TestEnv

real_calls: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    real_calls.clear()


@activity(retry=RetryPolicy(max_attempts=3, initial_interval="1m", backoff=1.0))
async def charge(order: str, cents: int) -> str:
    real_calls.append(order)
    return f"real-{order}-{cents}"


@activity
def notify(to: str) -> None:
    real_calls.append(f"notify:{to}")


@workflow
async def monthly(ctx: WorkflowContext, order: str) -> list[str]:
    out = []
    for day in range(30):
        await ctx.sleep("1 day")
        try:
            out.append(await ctx.run(charge, order, day))
        except Exception as exc:
            out.append(f"failed: {exc}")
    return out


@workflow
async def parent(ctx: WorkflowContext) -> list[str]:
    return await ctx.start_child(monthly, "child")


@workflow
async def waits_for_approval(ctx: WorkflowContext) -> str:
    try:
        return str(await ctx.wait_for_signal("approve", timeout="2h"))
    except WaitTimeoutError:
        return "timed out"


@workflow
async def sleeps_then_notifies(ctx: WorkflowContext) -> str:
    receipt = await ctx.run(charge, "o", 1)
    await ctx.sleep("3 days")
    await ctx.run(notify, "ada")
    return receipt


async def test_a_month_long_workflow_finishes_with_auto_advance() -> None:
    async with TestEnv(workflows=[monthly], auto_advance=True) as env:
        start = env.now()
        env.mock(charge, side_effect=lambda order, day: f"{order}-{day}")
        result = await env.result(await env.start(monthly, "o1"))
        assert result == [f"o1-{d}" for d in range(30)]
        assert (env.now() - start).days == 30
        assert real_calls == []


async def test_auto_advance_skips_time_for_a_parent_waiting_on_a_child() -> None:
    async with TestEnv(workflows=[monthly, parent], auto_advance=True) as env:
        env.mock(charge, returns="ok")
        assert await env.result(await env.start(parent)) == ["ok"] * 30


async def test_without_auto_advance_time_moves_only_when_told() -> None:
    async with TestEnv(workflows=[monthly]) as env:
        env.mock(charge, returns="ok")
        handle = await env.start(monthly, "o")
        with pytest.raises(TimeoutError):
            await env.result(handle, timeout=0.2)
        await env.advance("10 days")
        info = await env.wait_for(handle, step=20)
        assert info.status == "running"  # 10 sleeps + 10 charges, waiting on day 11
        await env.advance("20 days")
        assert await env.result(handle) == ["ok"] * 30


async def test_advance_fires_wait_timeouts_and_schedules_in_order() -> None:
    async with TestEnv(workflows=[waits_for_approval]) as env:
        await env.engine.create_schedule(
            "hourly", waits_for_approval, every="1h", overlap="allow_all"
        )
        await env.advance("3h")
        runs = (await env.engine.list(schedule_id="hourly")).items
        statuses = {r.id.split("@")[1][11:16]: r.status for r in runs}
        # the 01:00 run timed out at 03:00; 02:00 and 03:00 still wait
        assert statuses == {"01:00": "completed", "02:00": "running", "03:00": "running"}
        first = next(r for r in runs if r.status == "completed")
        assert await env.result(first.id) == "timed out"


async def test_mock_one_shot_behaviours_come_first_and_calls_are_recorded() -> None:
    async with TestEnv(workflows=[monthly]) as env:
        mock = env.mock(charge, returns="base")
        mock.raises_once(RuntimeError("card declined")).returns_once("second")
        handle = await env.start(monthly, "o")
        await env.advance("1 day")
        await env.advance("1m")  # the retry backoff after the first failed attempt
        await env.advance("1 day")
        assert [c.attempt for c in mock.calls] == [1, 2, 1]
        assert [c.result for c in mock.calls] == [None, "second", "base"]
        assert isinstance(mock.calls[0].error, RuntimeError)
        assert mock.calls[0].args == ("o", 0) and mock.calls[2].args == ("o", 1)
        assert mock.calls[1].at - mock.calls[0].at == 60
        mock.restore()
        await env.advance("1 day")
        assert real_calls == ["o"]
        await env.engine.cancel(handle.id)


async def test_mock_raises_goes_through_the_retry_policy() -> None:
    async with TestEnv(workflows=[monthly]) as env:
        mock = env.mock(charge, raises=ValueError("always"))
        await env.start(monthly, "o")
        await env.advance("1 day")
        await env.advance("5m")
        assert mock.call_count == 3  # max_attempts=3
        history = await env.engine.history((await env.engine.list()).items[0].id)
        failed = [s for s in history.steps if s.status == "failed"]
        assert failed and failed[0].attempts == 3
        assert ActivityError is not None


async def test_mock_refuses_a_side_effect_that_cannot_take_the_arguments() -> None:
    async with TestEnv(workflows=[monthly]) as env:
        with pytest.raises(InvalidArgumentError, match="cannot take its arguments"):
            env.mock(charge, side_effect=lambda order: order)
        with pytest.raises(InvalidArgumentError, match="not returns and raises"):
            env.mock(charge, returns=1, raises=ValueError())


async def test_restart_keeps_runs_and_mocks_and_never_reruns_completed_steps() -> None:
    async with TestEnv(workflows=[sleeps_then_notifies], storage="sqlite") as env:
        charged = env.mock(charge, returns="receipt")
        notified = env.mock(notify, returns=None)
        handle = await env.start(sleeps_then_notifies)
        await env.wait_for(handle, step=1)
        await env.restart()
        await env.advance("3 days")
        assert await env.result(handle.id) == "receipt"
        assert charged.call_count == 1 and notified.call_count == 1
        assert notified.calls[0].args == ("ada",)
    assert real_calls == []


@workflow
async def fans_out(ctx: WorkflowContext) -> str:
    await ctx.all(ctx.sleep("1 day"), ctx.sleep("2 days"))
    await ctx.race(ctx.sleep("3 days"), ctx.wait_for_signal("never"))
    return "ok"


async def test_auto_advance_skips_time_through_all_and_race() -> None:
    async with TestEnv(workflows=[fans_out], auto_advance=True) as env:
        start = env.now()
        assert await env.result(await env.start(fans_out)) == "ok"
        assert (env.now() - start).days == 5
