"""ctx.info: what a run knows about itself, fixed at its start and the same on replay."""

from __future__ import annotations

from datetime import UTC, datetime

from pyweft import RunInfo, WorkflowContext, workflow
from support.backends import Backend
from support.poll import eventually

seen: list[RunInfo] = []


@workflow(name="info_child")
async def info_child(ctx: WorkflowContext) -> str:
    seen.append(ctx.info)
    return ctx.info.parent_id or ""


@workflow(name="info_parent", version="7")
async def info_parent(ctx: WorkflowContext, hops: int) -> int:
    seen.append(ctx.info)
    if hops > 0:
        await ctx.continue_as_new(hops - 1)
    await ctx.start_child(info_child, id="kid")
    await ctx.wait_for_signal("finish")
    seen.append(ctx.info)
    return ctx.info.generation


async def test_info_describes_the_run_its_generation_and_its_children(backend: Backend) -> None:
    seen.clear()
    backend.clock.advance_to(datetime(2026, 5, 1, tzinfo=UTC).timestamp())
    async with backend.engine(workflows=[info_parent, info_child]) as engine:
        handle = await engine.start(
            info_parent, 1, idempotency_key="info-1", tags=["b", "a"], execution_timeout="1h"
        )
        await eventually(lambda: len(seen) == 3, what="parent twice and the child")
        first, second, child = seen
        assert first.workflow_id == second.workflow_id == handle.id
        assert (first.workflow_type, first.version) == ("info_parent", "7")
        assert first.created_at == datetime(2026, 5, 1, tzinfo=UTC)
        assert (first.generation, second.generation) == (0, 1)
        assert first.generation_started_at == first.created_at
        assert first.tags == ("a", "b") and first.idempotency_key == "info-1"
        assert first.execution_deadline == datetime(2026, 5, 1, 1, tzinfo=UTC)
        assert (first.parent_id, first.depth, first.forked_from) == (None, 0, None)
        assert (child.workflow_id, child.parent_id, child.depth) == ("kid", handle.id, 1)
        assert child.idempotency_key is None
        # An awaited child is bounded by its parent's deadline (issue 16).
        assert child.execution_deadline == first.execution_deadline

    # A restart replays the run: the info it sees is the same as before.
    async with backend.engine(workflows=[info_parent, info_child]) as engine:
        await eventually(lambda: len(seen) >= 4, what="replayed parent")
        assert seen[3] == second
        await engine.signal(handle.id, "finish")
        assert await engine.get_handle(handle.id).result(timeout=5) == 1
        assert seen[-1] == second

        forked = await engine.fork(handle.id, from_step=1)
        await eventually(lambda: any(i.forked_from for i in seen), what="forked run")
        [fork_info] = [i for i in seen if i.forked_from]
        assert (fork_info.workflow_id, fork_info.forked_at_step) == (forked.id, 1)
