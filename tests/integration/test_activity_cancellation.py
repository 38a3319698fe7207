"""Cancellation reaches activities: run cancel, run timeout, attempt timeout, lost race."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from pyweft import (
    ActivityCancelledError,
    ActivityError,
    RetryPolicy,
    WorkflowContext,
    activity,
    activity_context,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

seen: list[tuple[str, str]] = []
started: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    seen.clear()
    started.clear()


@activity(retry=RetryPolicy(max_attempts=1))
async def waits_async(tag: str) -> str:
    started.append(tag)
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        seen.append((tag, "CancelledError"))
        raise
    return "never"


@activity(retry=RetryPolicy(max_attempts=1), cancel_grace="30s")
def waits_sync(tag: str) -> str:
    ctx = activity_context()
    started.append(tag)
    while not ctx.cancelled:
        threading.Event().wait(0.002)
    try:
        ctx.check_cancelled()
    except ActivityCancelledError as err:
        seen.append((tag, err.reason))
        raise
    return "never"


@workflow(name="both_kinds")
async def both_kinds(ctx: WorkflowContext) -> list[str]:
    return list(await ctx.all(ctx.run(waits_async, "async"), ctx.run(waits_sync, "sync")))


async def test_cancelling_the_run_cancels_async_and_def_activities(backend: Backend) -> None:
    async with backend.engine(workflows=[both_kinds]) as engine:
        handle = await engine.start(both_kinds, id="cancel-1")
        await eventually(lambda: len(started) == 2, what="both activities running")
        await engine.cancel("cancel-1")
        await eventually(lambda: len(seen) == 2, what="both saw the cancellation")
        await eventually(_status_is(handle, "cancelled"), what="run cancelled")
    assert sorted(seen) == [("async", "CancelledError"), ("sync", "the run was cancelled")]


def _status_is(handle: Any, status: str) -> Any:
    async def check() -> bool:
        return bool((await handle.describe()).status == status)

    return check


async def test_the_run_timeout_cancels_async_and_def_activities(backend: Backend) -> None:
    async with backend.engine(workflows=[both_kinds]) as engine:
        handle = await engine.start(both_kinds, id="timeout-1", execution_timeout="1m")
        await eventually(lambda: len(started) == 2, what="both activities running")
        backend.clock.advance(60)
        await eventually(_status_is(handle, "timed_out"), what="run timed out")
    assert sorted(seen) == [
        ("async", "CancelledError"),
        ("sync", "the run passed its execution_timeout"),
    ]


@activity(retry=RetryPolicy(max_attempts=1), timeout="5s")
async def slow_async() -> str:
    return await _wait("async")


async def _wait(tag: str) -> str:
    started.append(tag)
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        seen.append((tag, "CancelledError"))
        raise
    return "never"


@activity(retry=RetryPolicy(max_attempts=1), timeout="5s", cancel_grace="30s")
def slow_sync() -> str:
    return waits_sync("sync")


@workflow(name="attempt_timeouts")
async def attempt_timeouts(ctx: WorkflowContext) -> list[str]:
    out = []
    for branch in (ctx.run(slow_async), ctx.run(slow_sync)):
        try:
            await branch
        except ActivityError as err:
            out.append(err.error_type)
    return out


async def test_an_attempt_timeout_cancels_async_and_def_activities(backend: Backend) -> None:
    async with backend.engine(workflows=[attempt_timeouts]) as engine:
        handle = await engine.start(attempt_timeouts, id="attempt-1")
        await eventually(lambda: len(started) == 1, what="the async activity running")
        backend.clock.advance(5)
        await eventually(lambda: len(started) == 2, what="the def activity running")
        backend.clock.advance(5)
        assert await handle.result(timeout=5) == ["ActivityTimeoutError"] * 2
    assert seen == [("async", "CancelledError"), ("sync", "the attempt's timeout passed")]


@workflow(name="racing")
async def racing(ctx: WorkflowContext) -> str:
    key, _ = await ctx.race_keyed(
        {
            "async": ctx.run(waits_async, "async"),
            "sync": ctx.run(waits_sync, "sync"),
            "timer": ctx.sleep(5),
        }
    )
    return key


async def test_activities_on_a_losing_branch_are_cancelled(backend: Backend) -> None:
    async with backend.engine(workflows=[racing]) as engine:
        handle = await engine.start(racing, id="race-1")
        await eventually(lambda: len(started) == 2, what="both activities running")
        backend.clock.advance(5)
        assert await handle.result(timeout=5) == "timer"
    assert sorted(seen) == [
        ("async", "CancelledError"),
        ("sync", "the workflow stopped waiting for it (e.g. its branch lost a race)"),
    ]


release = threading.Event()


@activity(retry=RetryPolicy(max_attempts=1), cancel_grace="20s")
def ignores_cancel() -> str:
    started.append("stubborn")
    release.wait(10)
    return "late"


@workflow(name="stubborn")
async def stubborn(ctx: WorkflowContext) -> str:
    return await ctx.run(ignores_cancel)


async def test_a_def_activity_that_ignores_cancellation_gets_its_grace_then_is_left(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    release.clear()
    caplog.set_level(logging.WARNING, logger="pyweft.activities")
    try:
        async with backend.engine(workflows=[stubborn]) as engine:
            handle = await engine.start(stubborn, id="stubborn-1")
            await eventually(lambda: started == ["stubborn"], what="activity running")
            await engine.cancel("stubborn-1")
            await eventually(lambda: backend.clock.pending_timers() == 1, what="grace armed")
            assert (await handle.describe()).status == "running"  # within its grace
            backend.clock.advance(20)
            await eventually(_status_is(handle, "cancelled"), what="run cancelled")
    finally:
        release.set()
    assert any("ignored its cancellation" in r.getMessage() for r in caplog.records)
