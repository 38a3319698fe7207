"""Cancels that land at awkward moments: fan-outs, suspended parents, sagas (issue 10).

Each test forces its race deterministically: a cancel stored while no engine
drives the run, writes held at the door (``FaultyStorage.pause_next_write``)
so the cancel lands while no branch is waiting, a write failed at an exact
point, or time moved on a ``VirtualClock``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest

from pyweft import (
    ActivityError,
    Engine,
    MemoryStorage,
    RetryPolicy,
    VirtualClock,
    WorkflowCancelledError,
    WorkflowContext,
    WorkflowNotFoundError,
    WorkflowTimeoutError,
    activity,
    workflow,
)
from pyweft.engine.replay import keys, records
from pyweft.storage.base import Op, Put
from pyweft.testing import FaultyStorage
from support.backends import Backend
from support.poll import eventually

released: list[str] = []
gates: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    released.clear()
    gates.clear()


@workflow(name="napper")
async def napper(ctx: WorkflowContext) -> str:
    await ctx.sleep("1h")
    return "rested"


@workflow(name="fan_of_children")
async def fan_of_children(ctx: WorkflowContext) -> list[str]:
    return await ctx.all(ctx.start_child(napper), ctx.start_child(napper), ctx.start_child(napper))


@workflow(name="fan_of_sleeps")
async def fan_of_sleeps(ctx: WorkflowContext) -> None:
    await ctx.all(ctx.sleep("1h"), ctx.sleep("1h"))


async def _status(engine: Engine, workflow_id: str) -> str:
    return (await engine.describe(workflow_id)).status


async def _all_status(engine: Engine, ids: Sequence[str], status: str) -> bool:
    return all([await _status(engine, i) == status for i in ids])


async def _asleep(engine: Engine, workflow_id: str) -> bool:
    """The run exists and its sleep (step 1) is open."""
    try:
        steps = (await engine.history(workflow_id)).steps
    except WorkflowNotFoundError:
        return False
    return bool(steps) and steps[0].status == "open"


def _grace_armed(engine: Engine, workflow_id: str) -> bool:
    run = engine._core.runs.get(workflow_id)
    return run is not None and run.shield is not None and run.shield.expires_at is not None


CHILDREN = ("p/1", "p/2", "p/3")


# --- item 9: every branch of a fan-out sees the cancel --------------------------------


async def test_a_cancel_stored_while_no_engine_drove_a_fan_out_reaches_every_child(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[fan_of_children, napper]) as engine:
        await engine.start(fan_of_children, id="p")
        await eventually(lambda: backend.clock.pending_timers() == 3, what="children asleep")
    async with backend.engine(workflows=[fan_of_children, napper], recover=False) as engine:
        await engine.cancel("p")  # stored only: nobody drives the run
    async with backend.engine(workflows=[fan_of_children, napper]) as engine:
        with pytest.raises(WorkflowCancelledError):
            await engine.get_handle("p").result(timeout=5)
        await eventually(lambda: _all_status(engine, CHILDREN, "cancelled"), what="children")


async def test_a_cancel_stored_while_no_engine_drove_two_sleeps_interrupts_both(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[fan_of_sleeps]) as engine:
        await engine.start(fan_of_sleeps, id="s")
        await eventually(lambda: backend.clock.pending_timers() == 2, what="both asleep")
    async with backend.engine(workflows=[fan_of_sleeps], recover=False) as engine:
        await engine.cancel("s")
    async with backend.engine(workflows=[fan_of_sleeps]) as engine:
        with pytest.raises(WorkflowCancelledError):
            await engine.get_handle("s").result(timeout=5)
        assert backend.clock.pending_timers() == 0  # both sleeps disarmed


def _creates(child_id: str) -> Callable[[Sequence[Op]], bool]:
    key = keys.wf(child_id)
    return lambda ops: any(isinstance(op, Put) and op.key == key for op in ops)


async def test_a_cancel_landing_while_every_branch_is_still_starting_its_child_reaches_all() -> (
    None
):
    faults = FaultyStorage(MemoryStorage())
    async with Engine(faults, workflows=[fan_of_children, napper], clock=VirtualClock()) as engine:
        held = [faults.pause_next_write(match=_creates(c)) for c in CHILDREN]
        handle = await engine.start(fan_of_children, id="p")
        for pause in held:
            await pause.reached()
        await handle.cancel()  # no branch is waiting yet: each meets it at its next step
        for pause in held:
            pause.release()
        with pytest.raises(WorkflowCancelledError):
            await handle.result(timeout=5)
        await eventually(lambda: _all_status(engine, CHILDREN, "cancelled"), what="children")


# --- item 10: children of a parent that ends are closed durably -----------------------


@workflow(name="waiting_parent")
async def waiting_parent(ctx: WorkflowContext) -> str:
    return await ctx.start_child(napper, id="kid")


@workflow(name="leaving_parent")
async def leaving_parent(ctx: WorkflowContext) -> str:
    return await ctx.start_child(napper, id="kid", parent_close_policy="request_cancel")


async def test_cancelling_a_suspended_parent_cancels_the_child_it_awaits(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[waiting_parent, napper]) as engine:
        await engine.start(waiting_parent, id="p")
        await eventually(lambda: _asleep(engine, "kid"), what="child asleep")
        await engine.suspend("p")
        await engine.cancel("p")
        assert await _status(engine, "p") == "cancelled"
        await eventually(lambda: _all_status(engine, ["kid"], "cancelled"), what="kid cancelled")


def _asks_kid_alone_to_cancel(ops: Sequence[Op]) -> bool:
    """A write asking the child to cancel that is not the parent's own terminal commit."""
    if any(op.key == keys.wf("p") for op in ops):
        return False
    for op in ops:
        if isinstance(op, Put) and op.key == keys.wf("kid"):
            state = records.decode_state(op.value)
            return state.cancel_requested and state.status == "running"
    return False


async def test_a_request_cancel_child_is_asked_to_cancel_in_the_parents_final_commit() -> None:
    inner = MemoryStorage()
    clock = VirtualClock()
    faults = FaultyStorage(inner)
    async with Engine(faults, workflows=[leaving_parent, napper], clock=clock) as engine:
        # Any write after the parent's final commit that asks the child to cancel fails,
        # as if the process had died between the two.
        faults.fail_nth_write(match=_asks_kid_alone_to_cancel)
        assert await (await engine.start(leaving_parent, id="p")).result(timeout=5) == "kid"
        await eventually(lambda: _all_status(engine, ["kid"], "cancelled"), what="kid cancelled")
        assert clock.pending_timers() == 0


# --- item 11: a saga's compensations finish when a cancel or a timeout lands ----------


@activity
async def book(item: str) -> str:
    return item


@activity(retry=RetryPolicy(max_attempts=1))
async def pay() -> None:
    gate = gates.setdefault("pay", asyncio.Event())
    await gate.wait()
    raise RuntimeError("card declined")


@activity
async def release(item: str) -> None:
    gate = gates.get(f"release {item}")
    if gate is not None:
        released.append(f"releasing {item}")
        await gate.wait()
    released.append(item)


@workflow(name="trip")
async def trip(ctx: WorkflowContext) -> str:
    try:
        async with ctx.saga() as saga:
            for item in ("b1", "b2", "b3", "b4"):
                await saga.run(book, item, compensate=release)
            await ctx.run(pay)
    except ActivityError:
        return "rolled back"
    return "paid"


async def test_a_cancel_during_compensation_lets_every_compensation_finish(
    backend: Backend,
) -> None:
    gates["release b3"] = asyncio.Event()
    gates["pay"] = asyncio.Event()
    gates["pay"].set()
    async with backend.engine(workflows=[trip]) as engine:
        handle = await engine.start(trip, id="t")
        await eventually(lambda: "releasing b3" in released, what="release(b3) running")
        await handle.cancel()
        gates["release b3"].set()
        with pytest.raises(WorkflowCancelledError):  # the cancel is honoured afterwards
            await handle.result(timeout=5)
    assert released == ["b4", "releasing b3", "b3", "b2", "b1"]


async def test_compensations_stop_when_the_grace_period_after_a_cancel_runs_out(
    backend: Backend,
) -> None:
    gates["release b3"] = asyncio.Event()  # never opened: b3's release hangs
    gates["pay"] = asyncio.Event()
    gates["pay"].set()
    async with backend.engine(workflows=[trip]) as engine:
        handle = await engine.start(trip, id="t")
        await eventually(lambda: "releasing b3" in released, what="release(b3) running")
        await handle.cancel()
        await eventually(lambda: _grace_armed(engine, "t"), what="grace period armed")
        backend.clock.advance(299)
        assert await _status(engine, "t") == "running"
        backend.clock.advance(1)
        with pytest.raises(WorkflowCancelledError):
            await handle.result(timeout=5)
    assert released == ["b4", "releasing b3"]


async def test_an_execution_timeout_still_lets_the_compensations_run(backend: Backend) -> None:
    async with backend.engine(workflows=[trip]) as engine:
        handle = await engine.start(trip, id="t", execution_timeout=60)
        await eventually(lambda: "pay" in gates, what="paying")
        backend.clock.advance(60)
        with pytest.raises(WorkflowTimeoutError):
            await handle.result(timeout=5)
    assert released == ["b4", "b3", "b2", "b1"]
