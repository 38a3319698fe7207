"""Options given at start(): search attributes in the create write; child execution
timeouts and the parent's deadline bounding its children."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from pyweft import (
    ChildWorkflowError,
    InvalidArgumentError,
    WorkflowContext,
    WorkflowNotFoundError,
    workflow,
)
from support.backends import Backend
from support.poll import eventually


@workflow
async def tagged(ctx: WorkflowContext) -> dict[str, Any]:
    seen = ctx.attributes
    await ctx.wait_for_signal("go")
    return seen


async def test_attributes_given_at_start_are_indexed_and_seen_by_the_run(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[tagged]) as engine:
        handle = await engine.start(
            tagged, id="a", attributes={"customer": "acme", "amount": 120}, tags=["vip"]
        )
        await engine.start(tagged, id="b", attributes={"customer": "other"})
        page = await engine.list(attributes={"customer": "acme"})
        assert [info.id for info in page.items] == ["a"]
        big = await engine.list(attributes={"amount": {"gte": 100}})
        assert [info.id for info in big.items] == ["a"]
        await handle.signal("go")
        assert await handle.result(timeout=5) == {"customer": "acme", "amount": 120}


async def test_attributes_of_a_delayed_run_are_there_when_it_starts(backend: Backend) -> None:
    async with backend.engine(workflows=[tagged]) as engine:
        handle = await engine.start(tagged, id="d", attributes={"k": "v"}, start_delay="1m")
        assert [i.id for i in (await engine.list(attributes={"k": "v"})).items] == ["d"]
        backend.clock.advance(61)
        await handle.signal("go")
        assert await handle.result(timeout=5) == {"k": "v"}


async def test_bad_attributes_refuse_the_start_and_store_nothing(backend: Backend) -> None:
    async with backend.engine(workflows=[tagged]) as engine:
        with pytest.raises(InvalidArgumentError, match="search attribute"):
            await engine.start(tagged, id="x", attributes={"bad name!": 1})
        with pytest.raises(InvalidArgumentError, match="unsupported type"):
            await engine.start(tagged, id="x", attributes={"when": timedelta(1)})
        assert (await engine.list()).items == []


@workflow
async def slow_child(ctx: WorkflowContext) -> str:
    await ctx.set_event("deadline", ctx.info.execution_deadline)
    await ctx.wait_for_signal("never")
    return "finished"


@workflow
async def parent(ctx: WorkflowContext, timeout: float | None, policy: str) -> str:
    await ctx.set_event("deadline", ctx.info.execution_deadline)
    try:
        got = await ctx.start_child(
            slow_child,
            id=f"{ctx.workflow_id}-child",
            execution_timeout=timeout,
            parent_close_policy=policy,  # type: ignore[arg-type]
        )
    except ChildWorkflowError as exc:
        return exc.status
    return str(got)


async def test_child_execution_timeout_times_the_child_out(backend: Backend) -> None:
    async with backend.engine(workflows=[parent, slow_child]) as engine:
        handle = await engine.start(parent, 30.0, "await", id="p")
        await eventually(lambda: _exists(engine, "p-child"), what="child created")
        deadline = await engine.get_event("p-child", "deadline", timeout=5)
        assert deadline == (await engine.describe("p-child")).created_at + timedelta(seconds=30)
        backend.clock.advance(31)
        assert await handle.result(timeout=5) == "timed_out"


async def test_parent_deadline_bounds_its_children_unless_abandoned(backend: Backend) -> None:
    async with backend.engine(workflows=[parent, slow_child]) as engine:
        await engine.start(parent, None, "await", id="a", execution_timeout="1h")
        await engine.start(parent, 7200.0, "request_cancel", id="r", execution_timeout="1h")
        await engine.start(parent, None, "abandon", id="x", execution_timeout="1h")

        async def deadline(run_id: str) -> Any:
            await eventually(lambda: _exists(engine, run_id), what=f"{run_id} created")
            return await engine.get_event(run_id, "deadline", timeout=5)

        assert await deadline("a-child") == await deadline("a") is not None
        assert await deadline("r-child") == await deadline("r")
        assert await deadline("x-child") is None


async def _exists(engine: Any, run_id: str) -> bool:
    try:
        await engine.describe(run_id)
    except WorkflowNotFoundError:
        return False
    return True
