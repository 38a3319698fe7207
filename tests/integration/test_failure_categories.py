"""Every failed run carries a failure category: filterable in list, groupable in
aggregate, shown in describe (and by the CLI: tests/acceptance/test_cli_categories.py)."""

from __future__ import annotations

import pytest

from pyweft import (
    InvalidArgumentError,
    RetryPolicy,
    WorkflowContext,
    activity,
    workflow,
)
from support.backends import Backend
from support.poll import eventually


@activity(retry=RetryPolicy(max_attempts=1))
async def bad_input() -> None:
    raise ValueError("no such customer")


@activity(retry=RetryPolicy(max_attempts=1), timeout="1s")
async def hangs() -> None:
    import asyncio

    await asyncio.Event().wait()


@workflow
async def app_failure(ctx: WorkflowContext) -> None:
    await ctx.run(bad_input)


@workflow
async def activity_timeout(ctx: WorkflowContext) -> None:
    await ctx.run(hangs)


@workflow
async def waits(ctx: WorkflowContext) -> None:
    await ctx.sleep(3600)


@workflow
async def too_long(ctx: WorkflowContext) -> None:
    for _ in range(5):
        await ctx.sleep(0)


@workflow
async def fine(ctx: WorkflowContext) -> int:
    return 1


async def _ended(backend: Backend, engine: object, workflow_id: str) -> None:
    async def done() -> bool:
        info = await engine.describe(workflow_id)  # type: ignore[attr-defined]
        return bool(info.is_terminal)

    await eventually(done, what=f"{workflow_id} to end")


async def test_failed_runs_are_categorised_listed_and_counted(backend: Backend) -> None:
    kinds = [app_failure, activity_timeout, waits, too_long, fine]
    async with backend.engine(workflows=kinds, max_history_steps=3) as engine:
        await engine.start(app_failure, id="app")
        await engine.start(activity_timeout, id="act-timeout")
        await engine.start(waits, id="exec-timeout", execution_timeout="30s")
        await engine.start(waits, id="cancelled")
        await engine.start(too_long, id="resource")
        await engine.start(fine, id="ok")
        await eventually(lambda: backend.clock.pending_timers() >= 3, what="timers armed")
        await engine.cancel("cancelled")
        backend.clock.advance(1)  # the activity's 1 s timeout
        await _ended(backend, engine, "act-timeout")
        backend.clock.advance(30)  # the execution timeout
        for workflow_id in ("app", "exec-timeout", "cancelled", "resource", "ok"):
            await _ended(backend, engine, workflow_id)

        expected = {
            "app": "application",
            "act-timeout": "timeout",
            "exec-timeout": "timeout",
            "cancelled": "cancellation",
            "resource": "resource",
            "ok": None,
        }
        for workflow_id, category in expected.items():
            assert (await engine.describe(workflow_id)).failure_category == category, workflow_id
        timeouts = await engine.list(failure_category="timeout")
        assert sorted(i.id for i in timeouts.items) == ["act-timeout", "exec-timeout"]
        assert [i.id for i in (await engine.list(failure_category="resource")).items] == [
            "resource"
        ]
        groups = await engine.aggregate(group_by="failure_category")
        assert {g.key: g.count for g in groups} == {
            "timeout": 2,
            "application": 1,
            "cancellation": 1,
            "resource": 1,
        }
        typed = await engine.aggregate(group_by="failure_category", workflow_type="waits")
        assert {g.key: g.count for g in typed} == {"timeout": 1, "cancellation": 1}
        with pytest.raises(InvalidArgumentError, match="unknown failure_category"):
            await engine.list(failure_category="oops")


@workflow(name="drifting")
async def drifting_v1(ctx: WorkflowContext) -> None:
    await ctx.sleep(60)
    await ctx.sleep(60)


@workflow(name="drifting")
async def drifting_v2(ctx: WorkflowContext) -> None:
    await ctx.memo("changed", lambda: 1)  # the code no longer replays the recorded sleep
    await ctx.sleep(60)


async def test_code_that_no_longer_replays_is_non_determinism(backend: Backend) -> None:
    async with backend.engine(workflows=[drifting_v1]) as engine:
        await engine.start(drifting_v1, id="d1")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="first sleep")
        backend.clock.advance(60)
        await eventually(lambda: backend.clock.pending_timers() == 1, what="second sleep")

        async def recorded() -> bool:
            return len(await engine.history("d1")) >= 2

        await eventually(recorded, what="the first sleep recorded")
    async with backend.engine(workflows=[drifting_v2]) as engine:

        async def blocked() -> bool:
            return (await engine.describe("d1")).status == "blocked"

        await eventually(blocked, what="the run to block")
        assert (await engine.describe("d1")).failure_category == "non_determinism"
        groups = await engine.aggregate(group_by="failure_category")
        assert [(g.key, g.count) for g in groups] == [("non_determinism", 1)]
