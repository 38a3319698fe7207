"""Edge cases found while documenting: suspension, replay-stable values, race losers."""

from __future__ import annotations

import asyncio

import pytest

from pyweft import (
    Escalation,
    UpdateRejectedError,
    WorkflowContext,
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
async def note(what: str) -> str:
    ran.append(what)
    return what


async def test_suspension_is_not_seen_as_a_cancel_the_workflow_can_swallow(
    backend: Backend,
) -> None:
    @workflow(name="stubborn")
    async def stubborn(ctx: WorkflowContext) -> str:
        try:
            await ctx.sleep("1h")
        except asyncio.CancelledError:
            await ctx.run(note, "cleanup")  # must not be recorded on suspend
            return "swallowed"
        return "slept"

    async with backend.engine(workflows=[stubborn]) as engine:
        handle = await engine.start(stubborn, id="s")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")
        await handle.suspend()
        info = await handle.describe()
        assert info.status == "suspended" and info.step_count == 0
        await handle.resume()
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep again")
        backend.clock.advance(3600)
        assert await handle.result(timeout=5) == "slept"
    assert ran == []


async def test_now_is_replay_stable_after_continue_as_new(backend: Backend) -> None:
    seen: list[object] = []

    @workflow(name="gen")
    async def gen(ctx: WorkflowContext, n: int) -> str:
        if n == 0:
            await ctx.sleep(100)
            await ctx.continue_as_new(1)
        seen.append(ctx.now())
        await ctx.sleep(5)
        return "ok"

    async with backend.engine(workflows=[gen]) as engine:
        await engine.start(gen, 0, id="g")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="first sleep")
        backend.clock.advance(100)
        await eventually(lambda: len(seen) == 1, what="second generation")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="second sleep")
    async with backend.engine(workflows=[gen]) as engine:
        await eventually(lambda: len(seen) == 2, what="replayed")
        backend.clock.advance(5)
        assert await engine.get_handle("g").result(timeout=5) == "ok"
    assert seen[0] == seen[1]


async def test_losing_review_is_withdrawn_and_losing_child_is_cancelled(
    backend: Backend,
) -> None:
    @workflow(name="slow_kid")
    async def slow_kid(ctx: WorkflowContext) -> None:
        await ctx.sleep("1d")

    @workflow(name="impatient")
    async def impatient(ctx: WorkflowContext) -> str:
        await ctx.race(ctx.review("doc"), ctx.sleep(10))
        await ctx.race(ctx.start_child(slow_kid, id="kid"), ctx.sleep(10))
        return "done"

    async with backend.engine(workflows=[impatient, slow_kid]) as engine:
        handle = await engine.start(impatient)
        await eventually(lambda: backend.clock.pending_timers() == 1, what="racing review")
        backend.clock.advance(10)
        await eventually(lambda: backend.clock.pending_timers() == 2, what="racing child")
        backend.clock.advance(10)
        assert await handle.result(timeout=5) == "done"
        [review] = await engine.list_reviews(status=None)
        assert review.status == "withdrawn"

        async def kid_cancelled() -> bool:
            return (await engine.describe("kid")).status == "cancelled"

        await eventually(kid_cancelled, what="losing child cancelled")


async def test_purge_removes_the_runs_reviews(backend: Backend) -> None:
    @workflow(name="reviewed")
    async def reviewed(ctx: WorkflowContext) -> str:
        decision = await ctx.review("x")
        return decision.decision

    async with backend.engine(workflows=[reviewed]) as engine:
        handle = await engine.start(reviewed)

        async def requested() -> bool:
            return bool(await engine.list_reviews())

        await eventually(requested, what="review requested")
        [review] = await engine.list_reviews()
        await engine.submit_review(review.review_id, "approved", reviewer="r")
        assert await handle.result(timeout=5) == "approved"
        assert await engine.purge(workflow_type="reviewed") == 1
        assert await engine.list_reviews(status=None) == []


async def test_durations_are_accepted_as_strings_everywhere(backend: Backend) -> None:
    assert Escalation(after="1h").after == 3600

    @workflow(name="quick")
    async def quick(ctx: WorkflowContext) -> int:
        return 1

    async with backend.engine(workflows=[quick]) as engine:
        handle = await engine.start(quick)
        assert await engine.result(handle.id, timeout="5s") == 1


async def test_rejected_update_error_names_the_update(backend: Backend) -> None:
    @workflow(name="validated")
    async def validated(ctx: WorkflowContext) -> None:
        def check(n: int) -> None:
            if n < 0:
                raise ValueError("negative")

        ctx.on_update("set", lambda n: n, validator=check)
        await ctx.wait_for_signal("stop")

    async with backend.engine(workflows=[validated]) as engine:
        handle = await engine.start(validated)
        with pytest.raises(UpdateRejectedError) as err:
            await handle.update("set", -1)
        assert err.value.update == "set"


async def test_attributes_set_from_outside_survive_the_workflows_own_changes(
    backend: Backend,
) -> None:
    @workflow(name="labeller")
    async def labeller(ctx: WorkflowContext) -> None:
        ctx.set_attributes({"mine": 1})
        await ctx.wait_for_signal("more")
        ctx.set_attributes({"mine": 2})
        await ctx.wait_for_signal("stop")

    async with backend.engine(workflows=[labeller], poll_interval=0.02) as engine:
        handle = await engine.start(labeller)

        async def has_mine() -> bool:
            return bool((await handle.describe()).attributes)

        await eventually(has_mine, what="first attributes")
        async with backend.engine(workflows=[labeller], role="client") as other:
            await other.set_attributes(handle.id, {"theirs": "x"})  # from another engine

        async def delivered() -> bool:
            return await engine.storage.scan("wake:") == []

        await eventually(delivered, what="the wake-up to be handled")
        await handle.signal("more")

        async def both() -> bool:
            return (await handle.describe()).attributes == {"mine": 2, "theirs": "x"}

        await eventually(both, what="merged attributes")
        assert [i.id for i in (await engine.list(attributes={"theirs": "x"})).items] == [handle.id]


async def test_purge_leaves_nothing_of_a_run_but_its_spent_keys(backend: Backend) -> None:
    """Every key a run's life wrote goes with it, except what keeps a key spent."""

    @workflow(name="busy_life")
    async def busy_life(ctx: WorkflowContext) -> list[object]:
        seen: list[object] = []

        def add(n: int) -> int:
            seen.append(n)
            return len(seen)

        ctx.on_update("add", add)
        ctx.on_query("seen", lambda: list(seen))
        ctx.set_attributes({"region": "eu", "size": 3})
        seen.append(await ctx.wait_for_signal("go"))
        request = await ctx.wait_for_update("ask")
        request.respond("answered")
        seen.append((await ctx.review({"doc": 1})).decision)
        await ctx.wait_until(lambda: len(seen) >= 4, timeout=30)
        return seen

    async with backend.engine(workflows=[busy_life]) as engine:
        before = {key for key, _ in await engine.storage.scan("")}
        handle = await engine.start(busy_life, idempotency_key="life-1", tags=["t1"])
        await engine.signal(handle.id, "go", "hello", signal_id="s-1")
        assert await engine.update(handle.id, "ask", timeout=10) == "answered"

        async def review_requested() -> bool:
            return bool(await engine.list_reviews())

        await eventually(review_requested, what="review requested")
        [review] = await engine.list_reviews()
        await engine.submit_review(review.review_id, "approved", reviewer="r")

        async def reviewed() -> bool:  # the workflow has taken in the decision
            return bool(await engine.query(handle.id, "seen") == ["hello", "approved"])

        await eventually(reviewed, what="the decision reached the workflow")
        assert await engine.update(handle.id, "add", 7, idempotency_key="add-7") == 3
        assert await engine.update(handle.id, "add", 8) == 4
        assert await handle.result(timeout=10) == ["hello", "approved", 7, 8]

        assert await engine.purge(workflow_type="busy_life") == 1
        left = {key for key, _ in await engine.storage.scan("")} - before
        spent = {key for key in left if key.startswith(("idem:", "own:"))}
        assert left - spent == set(), sorted(left - spent)
