"""Suspend and resume, execution timeouts, delayed starts, and result waiters."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from pyweft import (
    InvalidArgumentError,
    WorkflowCancelledError,
    WorkflowContext,
    WorkflowTerminalError,
    WorkflowTimeoutError,
    activity,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

ran: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


@activity
async def note(what: str) -> str:
    ran.append(what)
    return what


@workflow
async def two_naps(ctx: WorkflowContext) -> list[str]:
    await ctx.run(note, "first")
    await ctx.sleep(10)
    await ctx.run(note, "second")
    await ctx.sleep(10)
    return list(ran)


async def test_suspended_run_is_not_recovered_and_resume_continues_it(backend: Backend) -> None:
    async with backend.engine(workflows=[two_naps]) as engine:
        handle = await engine.start(two_naps, id="s")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")
        await handle.suspend()
        assert (await handle.describe()).status == "suspended"
        assert not engine.is_running_here("s")
        waiter = asyncio.ensure_future(handle.result(timeout=10))
        backend.clock.advance(20)
        await asyncio.sleep(0.05)
        assert not waiter.done()  # result() keeps waiting while suspended
    waiter.cancel()
    async with backend.engine(workflows=[two_naps]) as engine:
        assert not engine.is_running_here("s")  # not recovered
        await engine.resume("s")
        assert engine.is_running_here("s")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="second nap")
        backend.clock.advance(10)
        assert await engine.get_handle("s").result(timeout=5) == ["first", "second"]
    assert ran == ["first", "second"]  # "first" did not run again after resume


async def test_cancel_of_suspended_run_releases_result_waiters(backend: Backend) -> None:
    async with backend.engine(workflows=[two_naps]) as engine:
        handle = await engine.start(two_naps)
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")
        await handle.suspend()
        waiter = asyncio.ensure_future(handle.result(timeout=10))
        await asyncio.sleep(0.02)
        await handle.cancel()
        with pytest.raises(WorkflowCancelledError):
            await waiter
        with pytest.raises(WorkflowTerminalError):
            await handle.resume()


async def test_execution_timeout_ends_an_overrunning_run(backend: Backend) -> None:
    async with backend.engine(workflows=[two_naps]) as engine:
        handle = await engine.start(two_naps, id="t", execution_timeout="15s")
        await eventually(lambda: backend.clock.pending_timers() == 2, what="nap and timeout")
        backend.clock.advance(10)
        await eventually(lambda: len(ran) == 2, what="second step")
        backend.clock.advance(5)
        with pytest.raises(WorkflowTimeoutError):
            await handle.result(timeout=5)
        info = await handle.describe()
    assert info.status == "timed_out"


async def test_execution_timeout_survives_restart(backend: Backend) -> None:
    async with backend.engine(workflows=[two_naps]) as engine:
        await engine.start(two_naps, id="t2", execution_timeout=15)
        await eventually(lambda: backend.clock.pending_timers() == 2, what="armed")
    backend.clock.advance(30)
    async with backend.engine(workflows=[two_naps]) as engine:
        with pytest.raises(WorkflowTimeoutError):
            await engine.get_handle("t2").result(timeout=5)


async def test_delayed_start_creates_a_pending_run_that_survives_restart(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[two_naps]) as engine:
        handle = await engine.start(two_naps, id="d", start_delay="1h")
        assert (await handle.describe()).status == "pending"
        assert backend.clock.pending_timers() == 1
    backend.clock.advance(1800)
    async with backend.engine(workflows=[two_naps]) as engine:
        assert (await engine.describe("d")).status == "pending"
        assert ran == []
        backend.clock.advance(1800)
        await eventually(lambda: ran == ["first"], what="started")
        assert (await engine.describe("d")).status == "running"


async def test_start_at_in_the_past_starts_now_and_bad_start_options_fail(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[two_naps]) as engine:
        past = datetime(2000, 1, 1, tzinfo=UTC)
        handle = await engine.start(two_naps, start_at=past)
        assert (await handle.describe()).status == "running"
        with pytest.raises(InvalidArgumentError):
            await engine.start(two_naps, start_at=datetime(2030, 1, 1))  # naive
        with pytest.raises(InvalidArgumentError):
            await engine.start(two_naps, start_delay=1, start_at=past)


async def test_cancel_of_pending_run(backend: Backend) -> None:
    async with backend.engine(workflows=[two_naps]) as engine:
        handle = await engine.start(two_naps, start_delay=60)
        await handle.cancel()
        with pytest.raises(WorkflowCancelledError):
            await handle.result(timeout=5)
        backend.clock.advance(60)
        await asyncio.sleep(0.02)
        assert ran == []


cleanups: list[str] = []


@activity
async def clean_up(tag: str) -> str:
    cleanups.append(tag)
    return tag


@workflow(name="cancel_catcher")
async def cancel_catcher(ctx: WorkflowContext, swallow: bool) -> str:
    try:
        got = await ctx.wait_for_signal("go")
    except asyncio.CancelledError:
        await ctx.run(clean_up, "after-cancel")
        if swallow:
            return "swallowed"
        raise
    return f"got {got}"


@pytest.mark.parametrize("swallow", [False, True])
async def test_suspend_and_shutdown_are_not_mistaken_for_a_cancel_by_code_that_catches_it(
    backend: Backend, swallow: bool
) -> None:
    """Stopping a run (suspend, engine shutdown) records nothing, whatever its code does."""
    cleanups.clear()
    parked = lambda engine, rid: engine.is_running_here(rid)  # noqa: E731
    async with backend.engine(workflows=[cancel_catcher]) as engine:
        handle = await engine.start(cancel_catcher, swallow, id="catcher")
        await eventually(lambda: parked(engine, "catcher"), what="parked")
        await handle.suspend()
        assert (await handle.describe()).status == "suspended"
        assert len(await handle.history()) == 0 and cleanups == []
        await handle.resume()
        await eventually(lambda: parked(engine, "catcher"), what="parked again")
    # Shutdown stopped the live wait too: still running, nothing recorded.
    async with backend.engine(workflows=[cancel_catcher]) as engine:
        handle = engine.get_handle("catcher")
        assert (await handle.describe()).status == "running"
        assert len(await handle.history()) == 0 and cleanups == []
        await handle.signal("go", 1)
        assert await handle.result(timeout=5) == "got 1"
    assert cleanups == []
