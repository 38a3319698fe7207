"""Retention and purge at the edges: awaited children, what a purge removes, and a
sweep that must get past the runs it keeps."""

from __future__ import annotations

import pytest

from pyweft import (
    Engine,
    UpdateNotFoundError,
    WorkflowContext,
    workflow,
)
from pyweft.storage.base import Op
from pyweft.storage.factory import open_storage
from pyweft.testing import FaultyStorage
from support.backends import Backend
from support.poll import eventually

HOUR = 3600.0


@workflow(name="kid", retention={"completed": "1h"})
async def kid(ctx: WorkflowContext) -> str:
    await ctx.wait_for_signal("go")
    return "kid-result"


@workflow(name="elder")
async def elder(ctx: WorkflowContext) -> str:
    got = await ctx.start_child(kid, id="the-kid")
    return f"parent got {got}"


async def _park_parent_with_finished_child(engine, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    """The parent is suspended while the child it awaits finishes; then time passes."""
    await engine.start(elder, id="p")
    await eventually(lambda: engine.is_running_here("the-kid"), what="child started")
    await engine.suspend("p")
    await engine.signal("the-kid", "go")
    assert await engine.get_handle("the-kid").result(timeout=5) == "kid-result"
    backend.clock.advance(2 * HOUR)


async def test_retention_keeps_a_finished_child_until_its_parent_has_recorded_it(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[elder, kid], retention_sweep_interval="1000d") as engine:
        await _park_parent_with_finished_child(engine, backend)
        assert await engine.sweep_retention() == 0
        assert (await engine.describe("the-kid")).status == "completed"
        await engine.resume("p")
        assert await engine.get_handle("p").result(timeout=5) == "parent got kid-result"
        # Recorded in the parent's journal now: the child may go.
        assert await engine.sweep_retention() == 1
        assert (await engine.list(workflow_type="kid")).items == []
        assert (await engine.describe("p")).status == "completed"


async def test_purge_keeps_a_finished_child_until_its_parent_has_recorded_it(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[elder, kid], retention_sweep_interval="1000d") as engine:
        await _park_parent_with_finished_child(engine, backend)
        assert await engine.purge(workflow_type="kid") == 0
        assert await engine.purge() == 0
        await engine.resume("p")
        assert await engine.get_handle("p").result(timeout=5) == "parent got kid-result"
        assert await engine.purge(workflow_type="kid") == 1


async def test_a_child_whose_parent_ended_without_it_can_be_purged(backend: Backend) -> None:
    async with backend.engine(workflows=[elder, kid], retention_sweep_interval="1000d") as engine:
        await _park_parent_with_finished_child(engine, backend)
        await engine.cancel("p")  # a suspended parent ends cancelled: it never reads the child
        await eventually(lambda: _status(engine, "p", "cancelled"), what="parent cancelled")
        assert await engine.purge(workflow_type="kid") == 1


async def _status(engine, workflow_id: str, status: str) -> bool:  # type: ignore[no-untyped-def]
    return (await engine.describe(workflow_id)).status == status


def _writes(fragment: str):  # type: ignore[no-untyped-def]
    def match(ops: list[Op]) -> bool:
        return any(fragment in op.key for op in ops)

    return match


async def test_purge_racing_the_parents_read_of_its_child_never_loses_the_result(
    backend: Backend,
) -> None:
    """The parent read its finished child, and its commit of that result is held at the
    door while retention and purge run; then that commit fails. The re-driven parent
    reads the child again, so the child must still be there."""
    inner = backend.storage()
    faults = FaultyStorage(open_storage(inner) if isinstance(inner, str) else inner)
    async with Engine(
        faults, clock=backend.clock, workflows=[elder, kid], retention_sweep_interval="1000d"
    ) as engine:
        await engine.start(elder, id="p")
        await eventually(lambda: engine.is_running_here("the-kid"), what="child started")
        held = faults.pause_next_write(match=_writes("wf:p:j:"))
        await engine.signal("the-kid", "go")
        await held.reached()
        backend.clock.advance(2 * HOUR)
        assert await engine.sweep_retention() == 0  # the parent has not recorded it yet
        assert await engine.purge(workflow_type="kid") == 0
        held.fail()
        assert await engine.get_handle("p").result(timeout=10) == "parent got kid-result"
        assert engine.stats().storage_failures == 1
        assert await engine.sweep_retention() == 1
    await faults.close()


@workflow(name="keeper")
async def keeper(ctx: WorkflowContext) -> int:
    return 0


@workflow(name="brief", retention={"completed": "1h"})
async def brief(ctx: WorkflowContext) -> int:
    return 1


async def test_the_sweep_gets_past_runs_it_keeps(backend: Backend) -> None:
    """Five older runs kept forever fill a batch of five; later expired runs still go."""
    async with backend.engine(
        workflows=[keeper, brief], retention_sweep_interval="1000d", retention_batch_size=5
    ) as engine:
        for i in range(5):
            await (await engine.start(keeper, id=f"keep-{i}")).result(timeout=5)
            backend.clock.advance(1)
        for i in range(4):
            await (await engine.start(brief, id=f"brief-{i}")).result(timeout=5)
            backend.clock.advance(1)
        backend.clock.advance(2 * HOUR)
        passes = [await engine.sweep_retention() for _ in range(3)]
        assert sum(passes) == 4
        assert all(n <= 5 for n in passes)
        assert (await engine.list(workflow_type="brief")).items == []
        assert len((await engine.list(workflow_type="keeper")).items) == 5


async def test_a_pass_deletes_at_most_one_batch_and_the_next_continues(backend: Backend) -> None:
    async with backend.engine(
        workflows=[keeper, brief], retention_sweep_interval="1000d", retention_batch_size=3
    ) as engine:
        for i in range(7):
            await (await engine.start(brief, id=f"brief-{i}")).result(timeout=5)
            await (await engine.start(keeper, id=f"keep-{i}")).result(timeout=5)
            backend.clock.advance(1)
        backend.clock.advance(2 * HOUR)
        assert [await engine.sweep_retention() for _ in range(4)] == [3, 3, 1, 0]
        assert len((await engine.list(workflow_type="keeper")).items) == 7


async def test_a_kept_run_is_swept_once_it_may_go(backend: Backend) -> None:
    """The cursor moves past a child kept for its parent, and comes back for it later."""
    async with backend.engine(
        workflows=[elder, kid, brief], retention_sweep_interval="1000d", retention_batch_size=2
    ) as engine:
        await _park_parent_with_finished_child(engine, backend)
        for i in range(3):
            await (await engine.start(brief, id=f"brief-{i}")).result(timeout=5)
        backend.clock.advance(2 * HOUR)
        assert sum([await engine.sweep_retention() for _ in range(3)]) == 3
        assert (await engine.describe("the-kid")).status == "completed"
        await engine.resume("p")
        await engine.get_handle("p").result(timeout=5)
        assert sum([await engine.sweep_retention() for _ in range(3)]) == 1
        assert (await engine.list(workflow_type="kid")).items == []


# --- what a purge removes ------------------------------------------------------------------


@workflow(name="answering")
async def answering(ctx: WorkflowContext) -> str:
    ctx.on_update("bump", lambda n: n + 1)
    request = await ctx.wait_for_update("ask")
    await request.respond(f"answer to {request.payload}")
    decision = await ctx.review({"doc": 1}, review_type="doc", reviewers=["ann"])
    return decision.decision


async def test_purge_removes_update_answers_and_reviews_with_the_run(backend: Backend) -> None:
    """As the retention guide says: nothing of a purged run is left but its start key."""
    async with backend.engine(workflows=[answering]) as engine:
        handle = await engine.start(answering, idempotency_key="start-key")
        await eventually(lambda: engine.is_running_here(handle.id))
        assert await engine.update(handle.id, "bump", 1, timeout=5, idempotency_key="b") == 2
        assert await engine.update(handle.id, "ask", "q", timeout=5, idempotency_key="a") == (
            "answer to q"
        )
        answer_ids = [v.decode() for _, v in await engine.storage.scan("upk:")]
        assert len(answer_ids) == 2

        async def requested() -> bool:
            return len(await engine.list_reviews(workflow_id=handle.id)) == 1

        await eventually(requested, what="review requested")
        (review,) = await engine.list_reviews(workflow_id=handle.id)
        await engine.submit_review(review.review_id, "approved", reviewer="ann")
        assert await handle.result(timeout=5) == "approved"

        assert await engine.purge() == 1
        for update_id in answer_ids:
            with pytest.raises(UpdateNotFoundError):
                await engine.update_result(update_id)
        assert await engine.list_reviews(status=None) == []
        left = [k for k, _ in await engine.storage.scan("") if not k.startswith("meta:")]
        left = [k for k in left if not k.startswith("own:")]
        assert left == ["idem:start-key"]
