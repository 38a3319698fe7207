"""Children, continue_as_new and updates when things happen at the same time (issue 10).

Each test forces one race deterministically: a write held or failed at an exact
point (``FaultyStorage``), a cancel stored while no engine drives the run, or
an engine restarted at a chosen moment; time moves on a ``VirtualClock``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest

from pyweft import (
    Engine,
    MemoryStorage,
    VirtualClock,
    WorkflowAlreadyExistsError,
    WorkflowContext,
    WorkflowNotFoundError,
    activity,
    workflow,
)
from pyweft.engine.replay import keys, records
from pyweft.storage.base import Op
from pyweft.testing import FaultyStorage
from support.backends import Backend
from support.poll import eventually

ran: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


def _writes(fragment: str) -> Callable[[Sequence[Op]], bool]:
    def match(ops: Sequence[Op]) -> bool:
        return any(fragment in op.key for op in ops)

    return match


@activity
async def note(text: str) -> str:
    ran.append(text)
    return text


@workflow(name="quick")
async def quick(ctx: WorkflowContext) -> str:
    return "quick"


@workflow(name="napper")
async def napper(ctx: WorkflowContext) -> str:
    await ctx.sleep("1h")
    return "rested"


# --- item 6: the outcome of a child start is journaled --------------------------------


@workflow(name="collider")
async def collider(ctx: WorkflowContext) -> str:
    try:
        await ctx.start_child(quick, id="fixed-child")
        outcome = "started"
    except WorkflowAlreadyExistsError:
        outcome = "collided"
    await ctx.run(note, outcome)
    await ctx.sleep(10)
    return outcome


async def test_a_child_start_that_collided_collides_again_on_replay_and_creates_nothing(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[collider, quick]) as engine:
        await (await engine.start(quick, id="fixed-child")).result(timeout=5)
        await engine.start(collider, id="p")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="parent asleep")
        assert await engine.purge(workflow_type="quick") == 1  # the old child is gone
    assert ran == ["collided"]
    async with backend.engine(workflows=[collider, quick]) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep again")
        backend.clock.advance(10)
        assert await engine.get_handle("p").result(timeout=5) == "collided"
        with pytest.raises(WorkflowNotFoundError):
            await engine.describe("fixed-child")  # replay did not start a child after all
        step = (await engine.history("p")).steps[0]
        assert step.error is not None
        assert (step.kind, step.status, step.error.type) == (
            "child",
            "failed",
            "WorkflowAlreadyExistsError",
        )


# --- item 13: default child ids differ between generations ---------------------------


@workflow(name="looper")
async def looper(ctx: WorkflowContext, generation: int) -> list[str]:
    child = await ctx.start_child(quick, parent_close_policy="abandon")
    if generation < 2:
        await ctx.continue_as_new(generation + 1)
    return [child]


async def test_default_child_ids_do_not_collide_across_continue_as_new(backend: Backend) -> None:
    async with backend.engine(workflows=[looper, quick]) as engine:
        handle = await engine.start(looper, 0, id="loop")
        assert await handle.result(timeout=5) == ["loop/g2/1"]
        children = sorted(c.id for c in (await engine.list(parent_id="loop")).items)
        assert children == ["loop/1", "loop/g1/1", "loop/g2/1"]  # generation 0 keeps its form


@workflow(name="renewer")
async def renewer(ctx: WorkflowContext, generation: int) -> str:
    await ctx.start_child(napper, id=f"asked-{generation}", parent_close_policy="request_cancel")
    await ctx.start_child(napper, id=f"kept-{generation}", parent_close_policy="abandon")
    if generation == 0:
        await ctx.continue_as_new(1)
    await ctx.sleep("30m")  # its children nap for an hour
    return "done"


async def test_continue_as_new_applies_the_close_policies_of_the_ending_generations_children(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[renewer, napper]) as engine:
        await engine.start(renewer, 0, id="renew")
        await eventually(
            lambda: _status(engine, "asked-0", "cancelled"),
            what="generation 0's request_cancel child cancelled when generation 1 began",
        )
        await eventually(lambda: _generation(engine, "renew", 1), what="generation 1 began")
        await eventually(
            lambda: _status(engine, "asked-1", "running"), what="generation 1's child started"
        )
        assert (await engine.describe("kept-0")).status == "running"  # abandoned: left alone
        assert (await engine.describe("asked-1")).status == "running"  # the live generation's
        # Asleep: the parent, and the naps of kept-0, kept-1 and asked-1.
        await eventually(lambda: backend.clock.pending_timers() == 4, what="all asleep")
        backend.clock.advance(30 * 60)
        assert await engine.get_handle("renew").result(timeout=5) == "done"
        await eventually(lambda: _status(engine, "asked-1", "cancelled"), what="closed at the end")


async def _status(engine: Engine, workflow_id: str, status: str) -> bool:
    try:
        return (await engine.describe(workflow_id)).status == status
    except WorkflowNotFoundError:
        return False


@workflow(name="careful_renewer")
async def careful_renewer(ctx: WorkflowContext, generation: int) -> str:
    try:  # written the way users write it: engine failures must not land here
        await ctx.run(note, f"g{generation}")
        await ctx.start_child(
            napper, id=f"careful-{generation}", parent_close_policy="request_cancel"
        )
    except Exception:
        await ctx.run(note, "compensated")
        return "compensated"
    if generation == 0:
        await ctx.continue_as_new(1)
    return "done"


@pytest.mark.parametrize("outcome_unknown", [False, True], ids=["failed", "reply-lost"])
async def test_a_failed_continue_as_new_commit_closes_the_children_once_and_carries_on(
    outcome_unknown: bool,
) -> None:
    faults = FaultyStorage(MemoryStorage())

    def generation_commit(ops: Sequence[Op]) -> bool:
        return any(op.key == keys.wf("careful") for op in ops) and any(
            op.key == keys.wf("careful-0") for op in ops
        )

    faults.fail_nth_write(match=generation_commit, outcome_unknown=outcome_unknown)
    async with Engine(faults, workflows=[careful_renewer, napper]) as engine:
        handle = await engine.start(careful_renewer, 0, id="careful")
        assert await handle.result(timeout=10) == "done"
        # Asked in the generation's commit (with a wake-up marker), whichever way it went.
        await eventually(lambda: _status(engine, "careful-0", "cancelled"), what="closed")
        # And generation 1's child when the run ended.
        await eventually(lambda: _status(engine, "careful-1", "cancelled"), what="closed too")
        assert ran == ["g0", "g1"]  # no branch the journal does not back, no step twice
    assert faults.counts.write_failures + faults.counts.lost_replies == 1


# --- item 7: a consumed cancel does not follow the run into its next generation ------


@workflow(name="stubborn")
async def stubborn(ctx: WorkflowContext, generation: int) -> str:
    if generation == 0:
        try:
            await ctx.sleep("1h")
        except asyncio.CancelledError:
            await ctx.continue_as_new(1)
    await ctx.sleep(100)
    return f"finished generation {generation}"


async def test_a_cancel_consumed_before_continue_as_new_is_not_delivered_after_a_restart(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[stubborn]) as engine:
        handle = await engine.start(stubborn, 0, id="s")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")
        await handle.cancel()
        await eventually(
            lambda: _generation(engine, "s", 1), what="generation 1 started after the cancel"
        )
        await eventually(lambda: backend.clock.pending_timers() == 1, what="generation 1 asleep")
    async with backend.engine(workflows=[stubborn]) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep again")
        backend.clock.advance(100)
        assert await engine.get_handle("s").result(timeout=5) == "finished generation 1"
        assert (await engine.describe("s")).status == "completed"


async def _generation(engine: Engine, workflow_id: str, generation: int) -> bool:
    raw = await engine.storage.get(keys.wf(workflow_id))
    return raw is not None and records.decode_state(raw).generation == generation


# --- item 8: an answer given with respond() is stored before the run ends -------------


@workflow(name="answerer")
async def answerer(ctx: WorkflowContext) -> str:
    request = await ctx.wait_for_update("double")
    request.respond(request.payload * 2)  # not awaited: the docs say that is fine
    return "answered"


async def test_an_unawaited_respond_is_stored_before_the_run_ends_even_if_its_write_fails() -> None:
    faults = FaultyStorage(MemoryStorage())
    async with Engine(faults, workflows=[answerer], clock=VirtualClock()) as engine:
        handle = await engine.start(answerer, id="a")
        await eventually(lambda: engine.is_running_here("a"))
        held = faults.pause_next_write(match=_writes("upr:"))
        asking = asyncio.ensure_future(engine.update("a", "double", 21, timeout=10))
        await held.reached()
        held.fail()  # the answer's write fails: the run must not end without it
        assert await asking == 42
        assert await handle.result(timeout=10) == "answered"
        assert engine.stats().storage_failures == 1


async def test_the_run_does_not_end_while_its_answer_is_being_written() -> None:
    faults = FaultyStorage(MemoryStorage())
    async with Engine(faults, workflows=[answerer], clock=VirtualClock()) as engine:
        await engine.start(answerer, id="a")
        await eventually(lambda: engine.is_running_here("a"))
        held = faults.pause_next_write(match=_writes("upr:"))
        asking = asyncio.ensure_future(engine.update("a", "double", 4, timeout=10))
        await held.reached()
        for _ in range(20):  # give a terminal commit every chance to overtake the answer
            await asyncio.sleep(0)
        assert (await engine.describe("a")).status == "running"
        held.release()
        assert await asking == 8
        assert (await engine.describe("a")).status == "completed"


# --- item 5: an update whose commit fails, for a run re-adopted from the store --------


@workflow(name="adder")
async def adder(ctx: WorkflowContext) -> int:
    total = 0

    def add(n: int) -> int:
        nonlocal total
        total += n
        return total

    ctx.on_update("add", add)
    await ctx.wait_for_signal("stop")
    return total


@pytest.mark.parametrize("outcome_unknown", [False, True], ids=["failed", "reply-lost"])
async def test_an_update_failing_to_commit_for_an_evicted_run_is_applied_once(
    outcome_unknown: bool,
) -> None:
    faults = FaultyStorage(MemoryStorage())
    async with Engine(faults, workflows=[adder], max_cached_runs=0) as engine:
        handle = await engine.start(adder, id="a")
        await eventually(lambda: "a" not in engine._core.runs, what="the parked run evicted")
        faults.fail_nth_write(match=_writes(":u:"), outcome_unknown=outcome_unknown)
        assert await engine.update("a", "add", 5, timeout=10) == 5
        await eventually(lambda: "a" not in engine._core.runs, what="evicted again")
        assert await engine.update("a", "add", 1, timeout=10) == 6
        await engine.signal("a", "stop")
        assert await handle.result(timeout=10) == 6  # the store and every answer agree
