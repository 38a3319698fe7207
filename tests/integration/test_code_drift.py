"""Code drift blocks a run instead of failing it: visible, journal kept, resumed by fixed code."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from pyweft import (
    Engine,
    InvalidArgumentError,
    WorkflowContext,
    WorkflowEvent,
    WorkflowFailedError,
    WorkflowTerminalError,
    activity,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

calls: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()


@activity
async def first() -> str:
    calls.append("first")
    return "first"


@activity
async def other() -> str:
    calls.append("other")
    return "other"


@activity
async def last() -> str:
    calls.append("last")
    return "last"


def make(step_one: object, *, version: str = "1") -> object:
    @workflow(name="drifting", version=version)
    async def drifting(ctx: WorkflowContext) -> str:
        x = await ctx.run(step_one)  # type: ignore[arg-type]
        await ctx.sleep(10)
        y = await ctx.run(last)
        return f"{x}+{y}"

    return drifting


async def _started_and_asleep(backend: Backend, *workflow_ids: str) -> None:
    ids = workflow_ids or ("drift",)
    async with backend.engine(workflows=[make(first)]) as engine:
        for workflow_id in ids:
            await engine.start("drifting", id=workflow_id)
        for workflow_id in ids:
            await eventually(lambda i=workflow_id: _asleep(engine, i), what="asleep")


async def _collect(stream: object, into: list[WorkflowEvent]) -> None:
    async for event in stream:  # type: ignore[attr-defined]
        into.append(event)


async def test_a_run_whose_code_drifted_is_blocked_visibly_and_resumes_under_fixed_code(
    backend: Backend,
) -> None:
    await _started_and_asleep(backend)
    events: list[WorkflowEvent] = []
    broken = backend.engine(workflows=[make(other)])  # step 1 is now another activity
    collector = asyncio.create_task(_collect(broken.events(), events))
    async with broken:
        await eventually(lambda: any(e.kind == "blocked" for e in events), what="the blocked event")
        info = await broken.describe("drift")
        assert info.status == "blocked" and not info.is_terminal
        assert info.error is not None and info.error.type == "NonDeterminismError"
        assert "step 1" in info.error.message
        assert "'first'" in info.error.message and "'other'" in info.error.message
        assert [i.id for i in (await broken.list(status="blocked")).items] == ["drift"]
        groups = {g.key: g.count for g in await broken.aggregate(group_by="status")}
        assert groups.get("blocked") == 1 and "running" not in groups
        blocked = next(e for e in events if e.kind == "blocked")
        assert blocked.data["error_type"] == "NonDeterminismError" and blocked.data["step"] == 1
        steps = [e for e in (await broken.history("drift")).events if e.kind == "step_completed"]
        assert len(steps) == 1  # the journal is kept as it was
        with pytest.raises(TimeoutError):  # result() waits for it, like for a suspended run
            await broken.result("drift", timeout=0.05)
    collector.cancel()
    assert calls == ["first"]  # the drifted code ran nothing

    async with backend.engine(workflows=[make(first)]) as fixed:  # the fix is deployed
        await eventually(lambda: fixed.is_running_here("drift"), what="picked up on recovery")
        assert (await fixed.describe("drift")).error is None
        await eventually(lambda: _asleep(fixed, "drift"), what="asleep again")
        backend.clock.advance(10)
        assert await fixed.result("drift", timeout=5) == "first+last"
    assert calls == ["first", "last"]  # step 1 replayed from the journal, not run again


async def test_a_workflow_that_catches_the_drift_records_nothing_more(backend: Backend) -> None:
    await _started_and_asleep(backend, "swallow")

    @workflow(name="drifting", version="1")
    async def swallowing(ctx: WorkflowContext) -> str:
        try:
            await ctx.run(other)
        except Exception as exc:  # what a careless workflow does
            calls.append(f"caught {type(exc).__name__}")
        await ctx.run(last)  # must not run, nor be recorded
        return "pretend all is well"

    async with backend.engine(workflows=[swallowing]) as engine:
        await eventually(
            lambda: _status(engine, "swallow", "blocked"), what="blocked despite the catch"
        )
        history = await engine.history("swallow")
    assert calls == ["first"]
    assert [e.kind for e in history.events].count("step_completed") == 1


async def test_resume_replays_a_blocked_run_again_and_it_blocks_again_while_it_drifts(
    backend: Backend,
) -> None:
    await _started_and_asleep(backend)
    events: list[WorkflowEvent] = []
    broken = backend.engine(workflows=[make(other)])
    collector = asyncio.create_task(_collect(broken.events("drift"), events))
    async with broken:
        await eventually(lambda: [e.kind for e in events].count("blocked") == 1, what="blocked")
        assert await broken.recover_all() == 0  # found drifting here already: not retried
        await broken.resume("drift")  # asked to: it tries again at once
        await eventually(lambda: [e.kind for e in events].count("blocked") == 2, what="again")
        assert (await broken.describe("drift")).status == "blocked"
    collector.cancel()
    assert "resumed" in [e.kind for e in events]
    assert calls == ["first"]


async def test_a_client_resume_marks_a_blocked_run_running_for_an_engine_with_the_code(
    backend: Backend,
) -> None:
    await _started_and_asleep(backend)
    async with backend.engine(workflows=[make(other)]) as broken:
        await eventually(lambda: _status(broken, "drift", "blocked"), what="blocked")
    async with backend.engine(role="client") as client:
        await client.resume("drift")
        info = await client.describe("drift")
        assert info.status == "running" and info.error is None
    async with backend.engine(workflows=[make(first)]) as fixed:
        await eventually(lambda: _asleep(fixed, "drift"), what="asleep again")
        backend.clock.advance(10)
        assert await fixed.result("drift", timeout=5) == "first+last"


async def test_with_fail_run_drift_fails_the_run_at_once(backend: Backend) -> None:
    await _started_and_asleep(backend)
    async with backend.engine(workflows=[make(other)], on_nondeterminism="fail_run") as engine:
        with pytest.raises(WorkflowFailedError) as err:
            await engine.result("drift", timeout=5)
    assert err.value.error_type == "NonDeterminismError"


async def test_a_blocked_run_can_be_failed_or_cancelled_by_hand(backend: Backend) -> None:
    await _started_and_asleep(backend, "to-fail", "to-cancel")
    async with backend.engine(workflows=[make(other)]) as engine:
        await eventually(lambda: _status(engine, "to-fail", "blocked"), what="blocked")
        await eventually(lambda: _status(engine, "to-cancel", "blocked"), what="blocked")
        for bad in ("", "   ", 42, "x" * 2001):
            with pytest.raises(InvalidArgumentError, match="reason"):
                await engine.fail("to-fail", bad)  # type: ignore[arg-type]
        assert (await engine.describe("to-fail")).status == "blocked"  # nothing stored
        await engine.fail("to-fail", "step 1 was removed for good; refunded by hand")
        with pytest.raises(WorkflowFailedError) as err:
            await engine.result("to-fail", timeout=5)
        assert err.value.error_type == "FailedByOperator"
        assert "refunded by hand" in err.value.error_message
        with pytest.raises(WorkflowTerminalError):
            await engine.fail("to-fail", "again")
        await engine.cancel("to-cancel")
        assert (await engine.describe("to-cancel")).status == "cancelled"
        running = await engine.start("drifting", id="live")
        await eventually(lambda: _status(engine, "live", "running"), what="live")
        with pytest.raises(InvalidArgumentError, match="Cancel it"):
            await engine.fail(running.id, "no")


async def test_a_version_mismatch_blocks_the_old_run_until_its_version_is_back(
    backend: Backend,
) -> None:
    await _started_and_asleep(backend, "old")
    async with backend.engine(workflows=[make(first, version="2")]) as v2:
        await eventually(lambda: _status(v2, "old", "blocked"), what="old blocked")
        info = await v2.describe("old")
        assert info.error is not None and info.error.type == "VersionMismatchError"
        assert "'1'" in info.error.message and "'2'" in info.error.message
        fresh = await v2.start("drifting", id="fresh")  # new runs are not held up
        await eventually(lambda: _asleep(v2, "fresh"), what="fresh asleep")
        backend.clock.advance(10)
        assert await fresh.result(timeout=5) == "first+last"
    async with backend.engine(workflows=[make(first, version="1")]) as v1:
        # Its sleep ended while it was blocked (the clock moved on for "fresh").
        assert await v1.result("old", timeout=5) == "first+last"
    assert calls.count("first") == 2  # once per run: the old run's step 1 was not redone


async def test_blocked_is_a_status_the_list_accepts() -> None:
    from pyweft.engine.replay.records import ALL_STATUSES, TERMINAL_STATUSES

    assert "blocked" in ALL_STATUSES and "blocked" not in TERMINAL_STATUSES


async def _asleep(engine: Engine, workflow_id: str) -> bool:
    """Step 1 is recorded and the sleep (step 2) is open: its deadline is stored."""
    history = await engine.history(workflow_id)
    return any(e.kind == "step_open" and e.step == 2 for e in history.events)


async def _status(engine: object, workflow_id: str, status: str) -> bool:
    with contextlib.suppress(Exception):
        return (await engine.describe(workflow_id)).status == status  # type: ignore[attr-defined]
    return False
