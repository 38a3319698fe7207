"""Retries, backoff, timeouts and budgets of activities, on memory and SQLite."""

from __future__ import annotations

import asyncio

import pytest

from pyweft import (
    ActivityError,
    RetryPolicy,
    WorkflowContext,
    WorkflowFailedError,
    activity,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

attempts: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    attempts.clear()


class Flaky(Exception):
    pass


class Fatal(Exception):
    pass


@activity(retry=RetryPolicy(max_attempts=5, initial_interval=10, backoff=2, max_interval=100))
async def flaky(fail_times: int) -> str:
    attempts["flaky"] = attempts.get("flaky", 0) + 1
    if attempts["flaky"] <= fail_times:
        raise Flaky(f"boom {attempts['flaky']}")
    return "ok"


@activity(retry=RetryPolicy(max_attempts=5, non_retryable=[Fatal]))
async def fatal() -> None:
    attempts["fatal"] = attempts.get("fatal", 0) + 1
    raise Fatal("card declined")


@workflow
async def uses_flaky(ctx: WorkflowContext, fail_times: int) -> str:
    return str(await ctx.run(flaky, fail_times))


@workflow
async def catches(ctx: WorkflowContext) -> str:
    try:
        await ctx.run(fatal)
    except ActivityError as err:
        return f"{err.error_type}: {err.error_message} after {err.attempts}"
    return "unreachable"


async def drive_backoff(backend: Backend, until_done: asyncio.Future[object]) -> None:
    while not until_done.done():
        await eventually(
            lambda: backend.clock.pending_timers() > 0 or until_done.done(), what="backoff armed"
        )
        if backend.clock.pending_timers():
            backend.clock.advance(backend.clock.next_deadline() - backend.clock.now())  # type: ignore[operator]


async def test_failed_attempts_are_retried_with_backoff(backend: Backend) -> None:
    async with backend.engine(workflows=[uses_flaky]) as engine:
        handle = await engine.start(uses_flaky, 2)
        await eventually(lambda: backend.clock.pending_timers() == 1, what="first backoff")
        assert backend.clock.next_deadline() == pytest.approx(backend.clock.now() + 10)
        backend.clock.advance(10)
        await eventually(lambda: attempts.get("flaky") == 2, what="second attempt")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="second backoff")
        assert backend.clock.next_deadline() == pytest.approx(backend.clock.now() + 20)
        backend.clock.advance(20)
        assert await handle.result(timeout=5) == "ok"
        [step] = await handle.history()
    assert step.attempts == 3 and step.status == "completed"


async def test_exhausted_retries_fail_the_run_with_the_original_error(backend: Backend) -> None:
    async with backend.engine(workflows=[uses_flaky]) as engine:
        handle = await engine.start(uses_flaky, 99)
        result = asyncio.ensure_future(handle.result(timeout=10))
        await drive_backoff(backend, result)
        with pytest.raises(WorkflowFailedError) as err:
            await result
    assert err.value.error_type == "ActivityError"
    assert "Flaky: boom 5" in err.value.error_message
    assert attempts["flaky"] == 5


async def test_non_retryable_error_is_catchable_in_the_workflow(backend: Backend) -> None:
    async with backend.engine(workflows=[catches]) as engine:
        result = await (await engine.start(catches)).result(timeout=5)
    assert result == "Fatal: card declined after 1"
    assert attempts["fatal"] == 1


async def test_activity_error_survives_restart_with_type_and_message(backend: Backend) -> None:
    @workflow(name="fail_then_sleep")
    async def fail_then_sleep(ctx: WorkflowContext) -> str:
        try:
            await ctx.run(fatal)
        except ActivityError as err:
            await ctx.sleep(5)
            return f"{err.error_type}/{err.error_message}/{err.step}"
        return "unreachable"

    async with backend.engine(workflows=[fail_then_sleep]) as engine:
        await engine.start(fail_then_sleep, id="f1")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep armed")
    async with backend.engine(workflows=[fail_then_sleep]) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep re-armed")
        backend.clock.advance(5)
        assert await engine.get_handle("f1").result(timeout=5) == "Fatal/card declined/1"
    assert attempts["fatal"] == 1


async def test_backoff_wait_survives_restart(backend: Backend) -> None:
    async with backend.engine(workflows=[uses_flaky]) as engine:
        await engine.start(uses_flaky, 1, id="b1")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="backoff armed")
        deadline = backend.clock.next_deadline()
    backend.clock.advance(4)
    async with backend.engine(workflows=[uses_flaky]) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="backoff re-armed")
        assert backend.clock.next_deadline() == deadline
        assert attempts["flaky"] == 1  # no attempt before the backoff ends
        backend.clock.advance(6)
        assert await engine.get_handle("b1").result(timeout=5) == "ok"
        [step] = await engine.history("b1")
    assert step.attempts == 2


async def test_attempt_timeout_cancels_an_async_activity(backend: Backend) -> None:
    cancelled = asyncio.Event()

    @activity(timeout=30, retry=RetryPolicy(max_attempts=1))
    async def hangs() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    @workflow(name="times_out")
    async def times_out(ctx: WorkflowContext) -> str:
        try:
            await ctx.run(hangs)
        except ActivityError as err:
            return err.error_type
        return "unreachable"

    async with backend.engine(workflows=[times_out]) as engine:
        handle = await engine.start(times_out)
        await eventually(lambda: backend.clock.pending_timers() == 1, what="timeout armed")
        backend.clock.advance(30)
        assert await handle.result(timeout=5) == "ActivityTimeoutError"
    assert cancelled.is_set()


async def test_per_call_options_override_the_activity_defaults(backend: Backend) -> None:
    @workflow(name="override")
    async def override(ctx: WorkflowContext) -> str:
        try:
            await ctx.run(flaky, 3, retry=RetryPolicy(max_attempts=1))
        except ActivityError as err:
            return f"gave up after {err.attempts}"
        return "unreachable"

    async with backend.engine(workflows=[override]) as engine:
        assert await (await engine.start(override)).result(timeout=5) == "gave up after 1"


async def test_schedule_to_close_budget_stops_retrying(backend: Backend) -> None:
    @workflow(name="budgeted")
    async def budgeted(ctx: WorkflowContext) -> str:
        try:
            await ctx.run(flaky, 99, schedule_to_close="25s")
        except ActivityError as err:
            return f"stopped after {err.attempts}"
        return "unreachable"

    async with backend.engine(workflows=[budgeted]) as engine:
        handle = await engine.start(budgeted)
        result = asyncio.ensure_future(handle.result(timeout=10))
        await drive_backoff(backend, result)
        # attempts at t=0 and t=10; the next would start at t=30, past the 25 s budget
        assert await result == "stopped after 2"


async def test_cancel_interrupts_a_running_activity(backend: Backend) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @activity
    async def slow() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    @workflow(name="cancellable")
    async def cancellable(ctx: WorkflowContext) -> None:
        await ctx.run(slow)

    from pyweft import WorkflowCancelledError

    async with backend.engine(workflows=[cancellable]) as engine:
        handle = await engine.start(cancellable)
        await asyncio.wait_for(started.wait(), 5)
        await handle.cancel()
        with pytest.raises(WorkflowCancelledError):
            await handle.result(timeout=5)
        assert (await handle.describe()).status == "cancelled"
    assert cancelled.is_set()


async def test_cancel_of_a_sleeping_run_survives_restart(backend: Backend) -> None:
    @workflow(name="long_nap")
    async def long_nap(ctx: WorkflowContext) -> None:
        await ctx.sleep("2 days")

    async with backend.engine(workflows=[long_nap]) as engine:
        handle = await engine.start(long_nap, id="nap")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep armed")
        await handle.cancel()
        await eventually(lambda: backend.clock.pending_timers() == 0, what="timer disarmed")
    async with backend.engine(workflows=[long_nap]) as engine:
        info = await engine.describe("nap")
    assert info.status == "cancelled"


async def test_cancelled_workflow_may_run_cleanup_steps(backend: Backend) -> None:
    @activity
    async def release(what: str) -> str:
        attempts["release"] = attempts.get("release", 0) + 1
        return f"released {what}"

    @workflow(name="with_cleanup")
    async def with_cleanup(ctx: WorkflowContext) -> str:
        try:
            await ctx.sleep("1h")
        except asyncio.CancelledError:
            await ctx.run(release, "seat")
            raise
        return "not cancelled"

    from pyweft import WorkflowCancelledError

    async with backend.engine(workflows=[with_cleanup]) as engine:
        handle = await engine.start(with_cleanup)
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")
        await handle.cancel()
        with pytest.raises(WorkflowCancelledError):
            await handle.result(timeout=5)
        steps = await handle.history()
    assert attempts["release"] == 1
    assert [(s.kind, s.status) for s in steps] == [("activity", "completed")]


async def test_concurrent_steps_are_numbered_in_call_order_and_replayed(backend: Backend) -> None:
    order: list[str] = []

    @activity
    async def tagged(tag: str, delay_steps: int) -> str:
        for _ in range(delay_steps):
            await asyncio.sleep(0)
        order.append(tag)
        return tag

    @workflow(name="fan_out")
    async def fan_out(ctx: WorkflowContext) -> list[str]:
        results = await asyncio.gather(
            ctx.run(tagged, "slow", 50), ctx.run(tagged, "fast", 0), ctx.run(tagged, "mid", 10)
        )
        await ctx.sleep(5)
        return list(results)

    async with backend.engine(workflows=[fan_out]) as engine:
        await engine.start(fan_out, id="fan")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")
        steps = await engine.history("fan")
    assert order == ["fast", "mid", "slow"]
    assert [s.result for s in steps[:3]] == ["slow", "fast", "mid"]  # numbered by call order
    assert (steps[3].kind, steps[3].status) == ("sleep", "open")
    async with backend.engine(workflows=[fan_out]) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep again")
        backend.clock.advance(5)
        assert await engine.get_handle("fan").result(timeout=5) == ["slow", "fast", "mid"]
    assert len(order) == 3  # nothing re-ran on replay
