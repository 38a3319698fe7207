"""ownership="workflow-lease": engines share one store, each run owned by one engine."""

from __future__ import annotations

import asyncio

import pytest

from pyweft import (
    Engine,
    MemoryStorage,
    OwnershipModeMismatchError,
    VirtualClock,
    WorkflowContext,
    activity,
    workflow,
)
from support.poll import eventually

executed: list[tuple[str, str]] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    executed.clear()


@activity
async def work(engine_tag: str, what: str) -> str:
    executed.append((engine_tag, what))
    return what


@workflow
async def shared(ctx: WorkflowContext, tag: str) -> str:
    await ctx.run(work, tag, "first")
    got = await ctx.wait_for_signal("go")
    await ctx.run(work, tag, f"second {got}")
    return f"done {got}"


def engine(storage: MemoryStorage, clock: VirtualClock, **kw: object) -> Engine:
    return Engine(
        storage,
        workflows=[shared],
        clock=clock,
        ownership="workflow-lease",
        poll_interval=0.02,
        claim_ttl=30,
        claim_renew_interval=5,
        **kw,  # type: ignore[arg-type]
    )


async def test_each_run_is_driven_by_the_engine_that_claimed_it() -> None:
    storage = MemoryStorage()
    clock_a, clock_b = VirtualClock(), VirtualClock()
    async with engine(storage, clock_a) as a, engine(storage, clock_b) as b:
        ha = await a.start(shared, "a", id="run-a")
        hb = await b.start(shared, "b", id="run-b")
        await eventually(lambda: len(executed) == 2, what="first steps")
        assert a.is_running_here("run-a") and not b.is_running_here("run-a")
        assert await b.recover_all() == 0  # run-a is held by a: b leaves it alone
        await b.signal("run-a", "go", 1)  # sent through the other engine
        await a.signal("run-b", "go", 2)
        assert await ha.result(timeout=5) == "done 1"
        assert await hb.result(timeout=5) == "done 2"
    assert sorted(executed) == [
        ("a", "first"),
        ("a", "second 1"),
        ("b", "first"),
        ("b", "second 2"),
    ]


async def test_a_stalled_owner_is_taken_over_and_fenced_out() -> None:
    storage = MemoryStorage()
    clock_a, clock_b = VirtualClock(), VirtualClock()
    a = engine(storage, clock_a)
    await a.open()
    await a.start(shared, "a", id="victim")
    await eventually(lambda: len(executed) == 1, what="first step")
    async with engine(storage, clock_b) as b:
        assert await b.reclaim() == 0  # a's claim is live
        clock_b.advance(30 + 2 * 5 + 1)  # b's view: a stopped renewing long ago
        assert await b.reclaim() == 1
        assert b.is_running_here("victim")
        await b.signal("victim", "go", "x")
        assert await b.get_handle("victim").result(timeout=5) == "done x"
        # The zombie wakes up: its next renewal finds the claim gone and stops the run,
        # while the engine itself lives on.
        clock_a.advance(5)
        await eventually(lambda: not a.is_running_here("victim"), what="zombie stopped")
        assert (await b.describe("victim")).status == "completed"
        assert executed.count(("a", "first")) == 1
        other = await a.start(shared, "a", id="fresh")  # a still serves its other runs
        await b.signal("fresh", "go", "y")
        assert await other.result(timeout=5) == "done y"
    await a.shutdown()


async def test_suspend_from_another_engine_takes_the_run_from_its_owner() -> None:
    storage = MemoryStorage()
    async with engine(storage, VirtualClock()) as a, engine(storage, VirtualClock()) as b:
        await a.start(shared, "a", id="s")
        await eventually(lambda: len(executed) == 1, what="first step")
        await b.suspend("s")
        await eventually(lambda: not a.is_running_here("s"), what="owner stopped")
        await b.resume("s")
        assert b.is_running_here("s")
        await a.signal("s", "go", "z")
        assert await b.get_handle("s").result(timeout=5) == "done z"
    assert executed == [("a", "first"), ("a", "second z")]  # the tag comes from the args


async def test_graceful_shutdown_releases_claims_for_immediate_takeover() -> None:
    storage = MemoryStorage()
    a = engine(storage, VirtualClock())
    await a.open()
    await a.start(shared, "a", id="handover")
    await eventually(lambda: len(executed) == 1, what="first step")
    await a.shutdown()
    async with engine(storage, VirtualClock()) as b:
        assert b.is_running_here("handover")  # recovered at once, no ttl wait
        await b.signal("handover", "go", 3)
        assert await b.get_handle("handover").result(timeout=5) == "done 3"


async def test_lease_and_workflow_lease_engines_refuse_to_share_a_store() -> None:
    storage = MemoryStorage()
    async with engine(storage, VirtualClock()):
        with pytest.raises(OwnershipModeMismatchError):
            async with Engine(storage, ownership="lease"):
                pass


async def test_child_workflows_are_claimed_by_the_parents_engine() -> None:
    @workflow(name="kid")
    async def kid(ctx: WorkflowContext) -> int:
        return 7

    @workflow(name="mom")
    async def mom(ctx: WorkflowContext) -> int:
        return int(await ctx.start_child(kid)) + 1

    storage = MemoryStorage()
    async with Engine(
        storage, workflows=[kid, mom], ownership="workflow-lease", clock=VirtualClock()
    ) as a:
        assert await (await a.start(mom)).result(timeout=5) == 8
        await asyncio.sleep(0)
        assert a._core.claims is not None and a._core.claims.claims == {}  # all released
