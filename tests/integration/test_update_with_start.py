"""engine.update_with_start: one atomic call that creates the run if absent and updates it."""

from __future__ import annotations

import asyncio

import pytest

from pyweft import (
    InvalidArgumentError,
    UpdateRejectedError,
    WorkflowAlreadyExistsError,
    WorkflowContext,
    workflow,
)
from support.backends import Backend


@workflow
async def counter(ctx: WorkflowContext, start: int) -> int:
    total = {"n": start}

    def add(amount: int) -> int:
        total["n"] += amount
        return total["n"]

    def positive(amount: int) -> None:
        if amount <= 0:
            raise ValueError("amount must be positive")

    ctx.on_update("add", add, validator=positive)
    ctx.on_update("peek", lambda: total["n"])
    await ctx.wait_for_signal("stop")
    return total["n"]


@workflow
async def other(ctx: WorkflowContext) -> None:
    await ctx.wait_for_signal("stop")


async def test_absent_run_is_started_and_gets_the_update(backend: Backend) -> None:
    async with backend.engine(workflows=[counter]) as engine:
        handle, answer = await engine.update_with_start(counter, 10, update=("add", 5), id="c")
        assert answer == 15
        again, answer = await engine.update_with_start(counter, 99, update=("add", 1), id="c")
        assert again.id == "c" and answer == 16  # existing run: its arguments are kept
        _, peeked = await engine.update_with_start(counter, 0, update="peek", id="c")
        assert peeked == 16
        await handle.signal("stop")
        assert await handle.result(timeout=5) == 16


async def test_twenty_concurrent_callers_make_one_run_and_each_update_lands(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[counter]) as engine:
        results = await asyncio.gather(
            *(engine.update_with_start(counter, 0, update=("add", 1), id="race") for _ in range(20))
        )
        assert sorted(answer for _, answer in results) == list(range(1, 21))
        page = await engine.list(id_prefix="race")
        assert [info.id for info in page.items] == ["race"]
        await engine.signal("race", "stop")
        assert await engine.get_handle("race").result(timeout=5) == 20


async def test_idempotency_key_applies_the_update_once(backend: Backend) -> None:
    async with backend.engine(workflows=[counter]) as engine:
        calls = [
            engine.update_with_start(counter, 0, update=("add", 7), id="i", idempotency_key="k")
            for _ in range(5)
        ]
        assert {answer for _, answer in await asyncio.gather(*calls)} == {7}
        _, total = await engine.update_with_start(counter, 0, update="peek", id="i")
        assert total == 7


async def test_rejected_update_with_start_still_leaves_the_run_started(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[counter]) as engine:
        with pytest.raises(UpdateRejectedError, match="positive"):
            await engine.update_with_start(counter, 0, update=("add", -1), id="r")
        assert (await engine.describe("r")).status == "running"


async def test_bad_input_and_another_workflow_type_are_refused(backend: Backend) -> None:
    async with backend.engine(workflows=[counter, other]) as engine:
        with pytest.raises(InvalidArgumentError, match="update must be"):
            await engine.update_with_start(counter, 0, update=("add",), id="x")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="needs id"):
            await engine.update_with_start(counter, 0, update="peek", id=None)  # type: ignore[arg-type]
        assert (await engine.list()).items == []
        await engine.start(other, id="o")
        with pytest.raises(WorkflowAlreadyExistsError, match="of workflow 'other'"):
            await engine.update_with_start(counter, 0, update="peek", id="o")
