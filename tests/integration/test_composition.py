"""ctx.all / ctx.race, children, sagas and recorded values."""

from __future__ import annotations

import asyncio

import pytest

from pyweft import (
    ActivityError,
    ChildWorkflowError,
    RetryPolicy,
    WorkflowContext,
    WorkflowFailedError,
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
async def job(name: str) -> str:
    ran.append(name)
    return name.upper()


@activity(retry=RetryPolicy(max_attempts=1))
async def broken(name: str) -> str:
    ran.append(name)
    raise RuntimeError(f"{name} broke")


@activity
async def slow(name: str) -> str:
    ran.append(f"start {name}")
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        ran.append(f"cancelled {name}")
        raise
    return name


async def test_all_returns_results_in_order_and_keeps_finished_branches(
    backend: Backend,
) -> None:
    @workflow(name="fan")
    async def fan(ctx: WorkflowContext) -> list[str]:
        try:
            await ctx.all(ctx.run(job, "a"), ctx.run(broken, "b"), ctx.run(job, "c"))
        except ActivityError as err:
            assert err.error_message == "b broke"
        await ctx.sleep(5)
        return list(await ctx.all(ctx.run(job, "d"), ctx.run(job, "e")))

    async with backend.engine(workflows=[fan]) as engine:
        await engine.start(fan, id="fan")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")
    assert sorted(ran) == ["a", "b", "c"]
    async with backend.engine(workflows=[fan]) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep again")
        backend.clock.advance(5)
        assert await engine.get_handle("fan").result(timeout=5) == ["D", "E"]
    assert sorted(ran) == ["a", "b", "c", "d", "e"]  # a and c did not run again


async def test_all_keyed_returns_a_mapping(backend: Backend) -> None:
    @workflow(name="keyed")
    async def keyed(ctx: WorkflowContext) -> dict[str, str]:
        return await ctx.all_keyed({"x": ctx.run(job, "x"), "y": ctx.run(job, "y")})

    async with backend.engine(workflows=[keyed]) as engine:
        assert await (await engine.start(keyed)).result(timeout=5) == {"x": "X", "y": "Y"}


async def test_race_cancels_losers_and_replays_the_winner(backend: Backend) -> None:
    @workflow(name="racer")
    async def racer(ctx: WorkflowContext) -> str:
        winner = await ctx.race(ctx.run(slow, "loser"), ctx.sleep(10))
        await ctx.sleep(20)
        return f"winner={winner}"

    async with backend.engine(workflows=[racer]) as engine:
        await engine.start(racer, id="race")
        await eventually(lambda: "start loser" in ran, what="activity started")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="race sleep armed")
        backend.clock.advance(10)
        await eventually(lambda: "cancelled loser" in ran, what="loser cancelled")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="second sleep")
    ran.clear()
    async with backend.engine(workflows=[racer]) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="second sleep again")
        backend.clock.advance(20)
        assert await engine.get_handle("race").result(timeout=5) == "winner=None"
    assert ran == []  # the losing activity was not started again on replay


async def test_losing_signal_wait_does_not_consume_the_signal(backend: Backend) -> None:
    @workflow(name="maybe_signal")
    async def maybe_signal(ctx: WorkflowContext) -> list[object]:
        key, value = await ctx.race_keyed(
            {"timeout": ctx.sleep(5), "signal": ctx.wait_for_signal("go")}
        )
        later = await ctx.wait_for_signal("go")
        return [key, value, later]

    async with backend.engine(workflows=[maybe_signal]) as engine:
        handle = await engine.start(maybe_signal)
        await eventually(lambda: backend.clock.pending_timers() == 1, what="racing")
        backend.clock.advance(5)
        await eventually(lambda: backend.clock.pending_timers() == 0, what="race over")
        await asyncio.sleep(0.02)
        await handle.signal("go", "kept")
        assert await handle.result(timeout=5) == ["timeout", None, "kept"]


async def test_child_result_and_failure_come_back_to_the_parent(backend: Backend) -> None:
    @workflow(name="kid")
    async def kid(ctx: WorkflowContext, n: int) -> int:
        if n < 0:
            raise ValueError("negative")
        await ctx.sleep(1)
        return n * 10

    @workflow(name="parent")
    async def parent(ctx: WorkflowContext) -> list[object]:
        good = await ctx.start_child(kid, 4)
        try:
            await ctx.start_child(kid, -1)
        except ChildWorkflowError as err:
            bad = f"{err.error_type}: {err.error_message}"
        return [good, bad]

    async with backend.engine(workflows=[kid, parent]) as engine:
        handle = await engine.start(parent, id="p")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="child asleep")
    async with backend.engine(workflows=[kid, parent]) as engine:  # both sides restart
        await eventually(lambda: backend.clock.pending_timers() == 1, what="child re-armed")
        backend.clock.advance(1)
        assert await engine.get_handle("p").result(timeout=5) == [40, "ValueError: negative"]
        children = await engine.list(parent_id="p")
        assert sorted(c.id for c in children.items) == ["p/1", "p/2"]
        assert handle.id == "p"


async def test_parent_close_policies(backend: Backend) -> None:
    @workflow(name="sleeper")
    async def sleeper(ctx: WorkflowContext) -> None:
        await ctx.sleep("1d")

    @workflow(name="boss")
    async def boss(ctx: WorkflowContext) -> list[str]:
        a = await ctx.start_child(sleeper, id="abandoned", parent_close_policy="abandon")
        b = await ctx.start_child(sleeper, id="cancelled", parent_close_policy="request_cancel")
        return [a, b]

    async with backend.engine(workflows=[sleeper, boss]) as engine:
        assert await (await engine.start(boss)).result(timeout=5) == ["abandoned", "cancelled"]

        async def settled() -> bool:
            return (await engine.describe("cancelled")).status == "cancelled"

        await eventually(settled, what="request_cancel child cancelled")
        assert (await engine.describe("abandoned")).status == "running"


async def test_saga_compensates_in_reverse_and_reraises(backend: Backend) -> None:
    @workflow(name="trip")
    async def trip(ctx: WorkflowContext) -> str:
        try:
            async with ctx.saga() as saga:
                await saga.run(job, "flight", compensate=job)  # undo gets "FLIGHT"
                await saga.run(job, "hotel", compensate=job)
                saga.add_compensation(job, "undo-explicit")
                await ctx.run(broken, "car")
        except ActivityError as err:
            return f"rolled back: {err.error_message}"
        return "booked"

    async with backend.engine(workflows=[trip]) as engine:
        result = await (await engine.start(trip)).result(timeout=5)
    assert result == "rolled back: car broke"
    assert ran == ["flight", "hotel", "car", "undo-explicit", "HOTEL", "FLIGHT"]


async def test_recorded_values_are_stable_across_replay(backend: Backend) -> None:
    seen: list[object] = []

    @workflow(name="stable")
    async def stable(ctx: WorkflowContext) -> list[str]:
        token = await ctx.memo("token", lambda: f"t-{len(seen)}")
        u, r, now = ctx.uuid4(), ctx.random(), ctx.now()
        seen.append((token, u, r, now))
        await ctx.sleep(3)
        return [token, str(u)]

    async with backend.engine(workflows=[stable]) as engine:
        await engine.start(stable, id="s")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")
    async with backend.engine(workflows=[stable]) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep again")
        backend.clock.advance(3)
        result = await engine.get_handle("s").result(timeout=5)
    assert len(seen) == 2 and seen[0] == seen[1]
    assert result == [seen[0][0], str(seen[0][1])]  # type: ignore[index]


async def test_continue_as_new_keeps_the_id_and_resets_the_journal(backend: Backend) -> None:
    @workflow(name="looper")
    async def looper(ctx: WorkflowContext, n: int) -> int:
        await ctx.run(job, f"round {n}")
        if n < 3:
            await ctx.continue_as_new(n + 1)
        return n

    async with backend.engine(workflows=[looper]) as engine:
        handle = await engine.start(looper, 1, id="loop")
        assert await handle.result(timeout=5) == 3
        history = await handle.history()
    assert ran == ["round 1", "round 2", "round 3"]
    assert len(history.steps) == 1  # only the last generation's journal remains


pins: list[int] = []


@workflow(name="race_then_pin")
async def race_then_pin(ctx: WorkflowContext) -> int:
    # The third branch is a race of its own: when it loses, its open sleep goes too.
    inner = ctx.race(ctx.sleep(200), ctx.wait_for_signal("inner"))
    await ctx.race(ctx.sleep(100), ctx.wait_for_signal("x"), inner)
    await ctx.wait_for_signal("y")
    pin = await ctx.get_version("change", 1, 2)
    pins.append(pin)
    return pin


async def test_a_race_deletes_its_losers_progress_so_a_restart_sees_no_open_steps(
    backend: Backend,
) -> None:
    pins.clear()
    async with backend.engine(workflows=[race_then_pin]) as engine:
        await engine.start(race_then_pin, id="rp")
        await eventually(lambda: backend.clock.pending_timers() == 2, what="both sleeps armed")
        await engine.signal("rp", "x", 1)

        async def race_recorded() -> bool:
            return any(s.kind == "race" for s in await engine.history("rp"))

        await eventually(race_recorded, what="the race recorded")
        assert await engine.storage.scan("wf:rp:p:") == []  # no loser's progress is left
        assert backend.clock.pending_timers() == 0
    # After a restart the run replays the race and reaches get_version at its live
    # frontier: nothing is ahead of it, so it gets the newest version.
    async with backend.engine(workflows=[race_then_pin]) as engine:
        await engine.signal("rp", "y", 1)
        assert await engine.get_handle("rp").result(timeout=5) == 2
    assert pins == [2]


mixed_calls: list[str] = []


@activity
async def tagged_job(tag: str) -> str:
    mixed_calls.append(tag)
    if tag.endswith("1") and tag.startswith("A"):
        await asyncio.sleep(0.05)  # A's first step finishes last: timing decides the order
    return tag


@workflow(name="helper_branches")
async def helper_branches(ctx: WorkflowContext, how: str) -> list[str]:
    async def flow(prefix: str) -> str:
        first = await ctx.run(tagged_job, prefix + "1")
        return first + await ctx.run(tagged_job, prefix + "2")

    if how == "all":
        return await ctx.all(flow("A"), flow("B"))
    if how == "race":
        return [await ctx.race(flow("A"), ctx.sleep(10))]
    if how == "gather":
        return list(await asyncio.gather(flow("A"), flow("B")))
    if how == "wait_until":
        return [str(await ctx.race(ctx.wait_until(lambda: True), ctx.sleep(1)))]
    if how == "list":  # as for a function taking a list: every operation closed unrun
        return await ctx.all([ctx.run(tagged_job, "A1"), ctx.run(tagged_job, "B1")])  # type: ignore[arg-type]
    # Fan-out of single operations is fine, nested composites included.
    nested = ctx.race(ctx.run(tagged_job, "C1"), ctx.sleep(10))
    return await ctx.all(ctx.run(tagged_job, "A1"), ctx.run(tagged_job, "B1"), nested)


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("all", "ctx.all branch 0 (helper_branches.<locals>.flow) is not a single durable"),
        ("race", "ctx.race branch 0 (helper_branches.<locals>.flow) is not a single durable"),
        ("gather", "called from task"),
        ("wait_until", "ctx.race branch 0 is ctx.wait_until"),
        ("list", "ctx.all branch 0 is a list of 2 operations, not one; pass them unpacked"),
    ],
)
async def test_branches_that_would_number_steps_by_timing_are_refused(
    backend: Backend, how: str, message: str
) -> None:
    """Replay could not number their later steps as the first run did (a helper
    coroutine's second step is numbered when its first one happens to finish), so
    they fail the run at once with advice, before anything is recorded."""
    mixed_calls.clear()
    async with backend.engine(workflows=[helper_branches]) as engine:
        handle = await engine.start(helper_branches, how)
        with pytest.raises(WorkflowFailedError) as failed:
            await handle.result(timeout=5)
        assert failed.value.error_type == "WorkflowUsageError"
        assert message in failed.value.error_message
        assert "child workflow" in failed.value.error_message or how in ("wait_until", "list")
        if how != "gather":
            assert mixed_calls == [] and len(await handle.history()) == 0


async def test_single_operations_and_nested_composites_replay_to_the_same_values(
    backend: Backend,
) -> None:
    mixed_calls.clear()
    async with backend.engine(workflows=[helper_branches]) as engine:
        handle = await engine.start(helper_branches, "ops")
        assert await handle.result(timeout=5) == ["A1", "B1", "C1"]
    async with backend.engine(workflows=[helper_branches]) as engine:
        forked = await engine.fork(handle.id)  # replays the whole journal in a new run
        assert await forked.result(timeout=5) == ["A1", "B1", "C1"]
    assert sorted(mixed_calls) == ["A1", "B1", "C1"]  # the fork ran nothing again
