"""A blocked run's drift is stored as fields beside its message: the step, what the
journal recorded there and what the code asked for (``describe(id).drift``)."""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
import pytest

from pyweft import (
    CodeDrift,
    DriftCall,
    Engine,
    WorkflowContext,
    WorkflowFailedError,
    activity,
    workflow,
)
from pyweft.engine.replay import records
from support.backends import Backend
from support.poll import eventually


@activity
async def reserve(sku: str, quantity: int) -> str:
    return f"reserved {quantity} {sku}"


@activity
async def charge(order: dict[str, Any]) -> int:
    return int(order["quantity"]) * 10


@activity
async def notify(who: str) -> None:
    return None


def recorded_shape() -> object:
    @workflow(name="shop")
    async def shop(ctx: WorkflowContext, sku: str) -> str:
        await ctx.run(reserve, sku, 2)
        await ctx.run(notify, "warehouse")
        await ctx.sleep(60)
        return "done"

    return shop


async def _parked(backend: Backend, workflow_id: str = "order") -> None:
    async with backend.engine(workflows=[recorded_shape()]) as engine:
        await engine.start("shop", "sku-1", id=workflow_id)
        await eventually(lambda: _asleep(engine, workflow_id), what="asleep at step 3")


async def _asleep(engine: Engine, workflow_id: str) -> bool:
    history = await engine.history(workflow_id)
    return any(e.kind == "step_open" and e.step == 3 for e in history.events)


async def _blocked(engine: Engine, workflow_id: str) -> bool:
    with contextlib.suppress(Exception):
        return (await engine.describe(workflow_id)).status == "blocked"
    return False


async def test_a_step_of_another_kind_is_stored_as_both_sides_of_the_diff(
    backend: Backend,
) -> None:
    await _parked(backend)

    @workflow(name="shop")
    async def reordered(ctx: WorkflowContext, sku: str) -> str:
        await ctx.run(charge, {"sku": sku, "quantity": 2})  # step 1 is now another activity
        return "never"

    async with backend.engine(workflows=[reordered]) as engine:
        await eventually(lambda: _blocked(engine, "order"), what="blocked")
        info = await engine.describe("order")
        listed = (await engine.list(status="blocked")).items[0]
    assert info.drift == CodeDrift(
        reason="step_mismatch",
        step=1,
        recorded=DriftCall(kind="activity", name="reserve", detail="completed"),
        requested=DriftCall(kind="activity", name="charge", args="(dict[2])"),
    )
    assert listed.drift == info.drift  # the list carries it too
    # The text still says it all, for readers that only show the message.
    assert info.error is not None and "step 1" in info.error.message
    assert "'reserve'" in info.error.message and "'charge'" in info.error.message
    # The arguments are summarised by type: their values never reach the clear-text error.
    assert "sku-1" not in info.error.message and "sku-1" not in repr(info.drift)


async def test_a_step_still_open_in_the_journal_is_shown_as_open(backend: Backend) -> None:
    await _parked(backend)

    @workflow(name="shop")
    async def no_sleep(ctx: WorkflowContext, sku: str) -> str:
        await ctx.run(reserve, sku, 2)
        await ctx.run(notify, "warehouse")
        await ctx.run(reserve, sku, 1)  # step 3 was an open sleep
        return "never"

    async with backend.engine(workflows=[no_sleep]) as engine:
        await eventually(lambda: _blocked(engine, "order"), what="blocked")
        drift = (await engine.describe("order")).drift
    assert drift is not None and drift.step == 3
    assert drift.recorded == DriftCall(kind="sleep", name="sleep", detail="open")
    assert drift.requested == DriftCall(kind="activity", name="reserve", args="(str, int)")


async def test_code_that_returns_before_the_recorded_steps_is_a_returned_early_drift(
    backend: Backend,
) -> None:
    await _parked(backend)

    @workflow(name="shop")
    async def shorter(ctx: WorkflowContext, sku: str) -> str:
        await ctx.run(reserve, sku, 2)
        return "short"  # step 2 (notify) is in the journal

    async with backend.engine(workflows=[shorter]) as engine:
        await eventually(lambda: _blocked(engine, "order"), what="blocked")
        drift = (await engine.describe("order")).drift
    assert drift is not None and drift.reason == "returned_early" and drift.step == 2
    assert (drift.recorded.kind, drift.recorded.name) == ("activity", "notify")
    assert drift.requested.kind is None and drift.requested.detail == "nothing (it returned)"


async def test_a_version_pin_the_code_dropped_is_a_drift_without_a_step(backend: Backend) -> None:
    def pinned(low: int, high: int) -> object:
        @workflow(name="pins")
        async def pins(ctx: WorkflowContext) -> int:
            version = await ctx.get_version("new-tax", low, high)
            await ctx.sleep(60)
            return version

        return pins

    async with backend.engine(workflows=[pinned(1, 1)]) as engine:
        await engine.start("pins", id="p")
        await eventually(lambda: _open_sleep(engine, "p"), what="asleep")
    async with backend.engine(workflows=[pinned(2, 3)]) as engine:
        await eventually(lambda: _blocked(engine, "p"), what="blocked")
        info = await engine.describe("p")
    assert info.error is not None and info.error.type == "VersionMismatchError"
    assert info.drift == CodeDrift(
        reason="version_pin",
        step=None,
        recorded=DriftCall(kind="version", name="new-tax", detail="pinned at 1"),
        requested=DriftCall(kind="version", name="new-tax", detail="supports 2..3"),
    )


async def _open_sleep(engine: Engine, workflow_id: str) -> bool:
    history = await engine.history(workflow_id)
    return any(e.kind == "step_open" for e in history.events)


async def test_a_run_of_a_version_no_engine_here_has_carries_both_versions(
    backend: Backend,
) -> None:
    await _parked(backend)

    @workflow(name="shop", version="2")
    async def v2(ctx: WorkflowContext, sku: str) -> str:
        return "v2"

    async with backend.engine(workflows=[v2]) as engine:
        await eventually(lambda: _blocked(engine, "order"), what="blocked")
        drift = (await engine.describe("order")).drift
    assert drift is not None and drift.reason == "workflow_version" and drift.step is None
    assert drift.recorded == DriftCall(kind="workflow", name="shop", detail="version 1")
    assert drift.requested.detail == "version 2 registered here"


async def test_with_fail_run_the_failed_run_keeps_the_diff(backend: Backend) -> None:
    await _parked(backend)

    @workflow(name="shop")
    async def reordered(ctx: WorkflowContext, sku: str) -> str:
        await ctx.run(notify, "first now")
        return "never"

    async with backend.engine(workflows=[reordered], on_nondeterminism="fail_run") as engine:
        with pytest.raises(WorkflowFailedError):
            await engine.result("order", timeout=5)
        info = await engine.describe("order")
    assert info.status == "failed" and info.drift is not None
    assert (info.drift.recorded.name, info.drift.requested.name) == ("reserve", "notify")


async def test_a_run_that_replays_again_under_fixed_code_has_no_drift_left(
    backend: Backend,
) -> None:
    await _parked(backend)

    @workflow(name="shop")
    async def broken(ctx: WorkflowContext, sku: str) -> str:
        await ctx.run(notify, sku)
        return "never"

    async with backend.engine(workflows=[broken]) as engine:
        await eventually(lambda: _blocked(engine, "order"), what="blocked")
    async with backend.engine(workflows=[recorded_shape()]) as engine:
        await eventually(lambda: _asleep(engine, "order"), what="running again")
        info = await engine.describe("order")
    assert info.status == "running" and info.error is None and info.drift is None


class _OldErrorInfo(msgspec.Struct, array_like=True, frozen=True):
    """ErrorInfo as stored before drifts were kept as fields."""

    type: str
    message: str
    code: str | None = None
    traceback: str | None = None
    module: str | None = None
    category: str | None = None


def test_an_error_stored_before_drifts_had_fields_reads_with_no_drift() -> None:
    old = _OldErrorInfo(
        type="NonDeterminismError", message="the journal recorded ...", category="non_determinism"
    )
    raw = msgspec.msgpack.encode(old)
    info = msgspec.msgpack.decode(raw, type=records.ErrorInfo)
    assert info.message == old.message and info.drift is None and info.code_drift is None


def test_a_stored_drift_survives_encoding() -> None:
    drift = CodeDrift(
        reason="step_mismatch",
        step=4,
        recorded=DriftCall(kind="signal", name="go", detail="open"),
        requested=DriftCall(kind="activity", name="ship", args="(str)"),
    )
    error = records.ErrorInfo(
        type="NonDeterminismError", message="m", drift=records.drift_record(drift)
    )
    decoded = msgspec.msgpack.decode(records.encode(error), type=records.ErrorInfo)
    assert decoded.code_drift == drift


async def test_a_recorded_signal_application_without_its_handler_now_is_a_handler_drift(
    backend: Backend,
) -> None:
    def tally(with_handler: bool) -> object:
        @workflow(name="tally")
        async def flow(ctx: WorkflowContext) -> int:
            seen: list[int] = []
            if with_handler:
                ctx.on_signal("bump", seen.append)
            await ctx.run(notify, "start")
            await ctx.wait_until(lambda: bool(seen), timeout=60)
            await ctx.sleep(60)
            return len(seen)

        return flow

    async with backend.engine(workflows=[tally(True)]) as engine:
        await engine.start("tally", id="t")
        await engine.signal("t", "bump", 1)

        async def asleep() -> bool:
            history = await engine.history("t")
            return any(e.kind == "step_open" and e.step == 3 for e in history.events)

        await eventually(asleep, what="the signal applied and the sleep open")
    async with backend.engine(workflows=[tally(False)]) as engine:
        await eventually(lambda: _blocked(engine, "t"), what="blocked")
        drift = (await engine.describe("t")).drift
    assert drift is not None and drift.reason == "handler_mismatch"
    assert drift.recorded == DriftCall(kind="signal", name="bump", detail="applied by a handler")
    assert drift.requested.kind is None
    assert drift.requested.detail == "no handler registered for it at that point"
