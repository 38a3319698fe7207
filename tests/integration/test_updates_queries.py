"""Queries read live state; updates change it durably and answer the caller."""

from __future__ import annotations

import asyncio

import pytest

from pyweft import (
    QueryNotFoundError,
    UpdateFailedError,
    UpdateRejectedError,
    UpdateTimeoutError,
    WorkflowContext,
    WorkflowTerminalError,
    WorkflowUsageError,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

applied: list[object] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    applied.clear()


def positive(amount: int) -> None:
    if amount <= 0:
        raise ValueError("amount must be positive")


@workflow
async def cart(ctx: WorkflowContext) -> list[int]:
    items: list[int] = []

    def add(amount: int) -> int:
        applied.append(amount)
        items.append(amount)
        return sum(items)

    def clear() -> str:
        items.clear()
        return "cleared"

    def boom(_: object) -> None:
        raise RuntimeError("handler exploded")

    ctx.on_update("add", add, validator=positive)
    ctx.on_update("clear", clear)
    ctx.on_update("boom", boom)
    ctx.on_query("items", lambda: list(items))

    @ctx.on_query("total")
    def total(times: int = 1) -> int:
        return sum(items) * times

    await ctx.wait_for_signal("checkout")
    return items


async def test_query_answers_from_live_state_while_parked(backend: Backend) -> None:
    async with backend.engine(workflows=[cart]) as engine:
        handle = await engine.start(cart)
        await eventually(lambda: engine.is_running_here(handle.id), what="running")
        await handle.update("add", 5)
        assert await handle.query("items") == [5]
        assert await engine.query(handle.id, "total", 3) == 15
        before = await engine.storage.scan("")
        await handle.query("items")
        assert await engine.storage.scan("") == before  # queries write nothing
        with pytest.raises(QueryNotFoundError) as err:
            await handle.query("nope")
        assert "items" in str(err.value)
        await handle.signal("checkout")
        await handle.result(timeout=5)
        # Finished: answered by replaying its journal, which writes nothing (issue 16).
        before = await engine.storage.scan("")
        assert await handle.query("items") == [5]
        assert await engine.storage.scan("") == before


async def test_update_handlers_change_state_and_answer(backend: Backend) -> None:
    async with backend.engine(workflows=[cart]) as engine:
        handle = await engine.start(cart)
        assert await handle.update("add", 2) == 2
        assert await handle.update("add", 3) == 5
        assert await handle.update("clear") == "cleared"  # no payload: no argument
        assert await handle.update("add", 4) == 4
        await handle.signal("checkout")
        assert await handle.result(timeout=5) == [4]


async def test_applied_updates_are_replayed_after_restart(backend: Backend) -> None:
    async with backend.engine(workflows=[cart]) as engine:
        await engine.start(cart, id="u")
        await engine.update("u", "add", 1)
        await engine.update("u", "add", 2)
    applied.clear()
    async with backend.engine(workflows=[cart]) as engine:
        await eventually(lambda: applied == [1, 2], what="updates replayed")
        assert await engine.query("u", "items") == [1, 2]
        assert await engine.update("u", "add", 3) == 6
        await engine.signal("u", "checkout")
        assert await engine.get_handle("u").result(timeout=5) == [1, 2, 3]


async def test_validator_rejection_writes_nothing(backend: Backend) -> None:
    async with backend.engine(workflows=[cart]) as engine:
        handle = await engine.start(cart)
        await handle.update("add", 1)
        before = await engine.storage.scan("")
        with pytest.raises(UpdateRejectedError) as err:
            await handle.update("add", -5)
        assert "positive" in str(err.value)
        assert await engine.storage.scan("") == before


async def test_failing_handler_fails_only_the_update(backend: Backend) -> None:
    async with backend.engine(workflows=[cart]) as engine:
        handle = await engine.start(cart)
        with pytest.raises(UpdateFailedError) as err:
            await handle.update("boom", 1)
        assert err.value.error_type == "RuntimeError"
        assert await handle.update("add", 7) == 7


async def test_idempotency_key_applies_an_update_once(backend: Backend) -> None:
    async with backend.engine(workflows=[cart]) as engine:
        handle = await engine.start(cart)
        answers = await asyncio.gather(
            *(handle.update("add", 10, idempotency_key="k1") for _ in range(20))
        )
        assert answers == [10] * 20
        assert await handle.update("add", 10, idempotency_key="k1") == 10
        assert applied == [10]
        assert await handle.query("items") == [10]


@workflow
async def approver(ctx: WorkflowContext) -> str:
    request = await ctx.wait_for_update("approve")
    await request.respond(f"approved {request.payload}")
    await ctx.sleep(10)
    return str(request.payload)


async def test_wait_for_update_returns_a_request_to_answer(backend: Backend) -> None:
    async with backend.engine(workflows=[approver]) as engine:
        handle = await engine.start(approver, id="w")
        assert await handle.update("approve", "doc-1") == "approved doc-1"
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")
    async with backend.engine(workflows=[approver]) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep again")
        backend.clock.advance(10)
        assert await engine.get_handle("w").result(timeout=5) == "doc-1"


async def test_unanswered_update_times_out_and_can_be_fetched_later(backend: Backend) -> None:
    @workflow(name="slow_approver")
    async def slow_approver(ctx: WorkflowContext) -> None:
        await ctx.wait_for_signal("ready")
        request = await ctx.wait_for_update("approve")
        request.respond("late answer")
        await ctx.wait_for_signal("never")

    async with backend.engine(workflows=[slow_approver]) as engine:
        handle = await engine.start(slow_approver)
        with pytest.raises(UpdateTimeoutError) as err:
            await handle.update("approve", timeout=0.05)
        update_id = err.value.update_id
        await handle.signal("ready")
        assert await engine.update_result(update_id, timeout=5) == "late answer"


async def test_update_to_finished_run_is_rejected(backend: Backend) -> None:
    @workflow(name="instant")
    async def instant(ctx: WorkflowContext) -> None:
        return None

    async with backend.engine(workflows=[instant]) as engine:
        handle = await engine.start(instant)
        await handle.result(timeout=5)
        before = await engine.storage.scan("")
        with pytest.raises(WorkflowTerminalError):
            await handle.update("x", 1)
        assert await engine.storage.scan("") == before


@workflow
async def gate(ctx: WorkflowContext) -> bool:
    state = {"open": False}

    def open_gate() -> str:
        state["open"] = True
        return "opened"

    ctx.on_update("open", open_gate)
    return await ctx.wait_until(lambda: state["open"], timeout="1h")


async def test_wait_until_wakes_when_an_update_changes_state(backend: Backend) -> None:
    async with backend.engine(workflows=[gate]) as engine:
        handle = await engine.start(gate)
        await eventually(lambda: backend.clock.pending_timers() == 1, what="waiting")
        assert await handle.update("open") == "opened"
        assert await handle.result(timeout=5) is True


async def test_wait_until_returns_false_on_timeout(backend: Backend) -> None:
    async with backend.engine(workflows=[gate]) as engine:
        handle = await engine.start(gate)
        await eventually(lambda: backend.clock.pending_timers() == 1, what="waiting")
        backend.clock.advance(3600)
        assert await handle.result(timeout=5) is False
        [step] = await handle.history()
    assert step.kind == "condition"


async def test_wait_until_inside_a_branch_is_rejected(backend: Backend) -> None:
    @workflow(name="branchy")
    async def branchy(ctx: WorkflowContext) -> str:
        try:
            await asyncio.gather(ctx.wait_until(lambda: True), ctx.sleep(1))
        except WorkflowUsageError as err:
            return err.code
        return "allowed"

    async with backend.engine(workflows=[branchy]) as engine:
        handle = await engine.start(branchy)
        await eventually(lambda: backend.clock.pending_timers() >= 1, what="sleep armed")
        backend.clock.advance(1)
        assert await handle.result(timeout=5) == "WorkflowUsageError"


async def test_bad_updates_are_rejected_before_any_write(backend: Backend) -> None:
    from pyweft import PayloadError, UpdateNotFoundError, WorkflowNotFoundError

    async with backend.engine(workflows=[cart], max_payload_bytes=1000) as engine:
        handle = await engine.start(cart)
        await handle.update("add", 1)
        before = await engine.storage.scan("")
        with pytest.raises(WorkflowNotFoundError):
            await engine.update("ghost", "add", 1)
        with pytest.raises(PayloadError):
            await handle.update("add", "x" * 2000)
        with pytest.raises(UpdateNotFoundError):
            await engine.update_result("no-such-update", timeout=0.01)
        assert await engine.storage.scan("") == before
        # An update nobody handles waits in the queue; the timeout names what the run handles.
        with pytest.raises(UpdateTimeoutError) as err:
            await handle.update("ad", 1, timeout=0.05)
        assert "add, boom, clear" in str(err.value)
