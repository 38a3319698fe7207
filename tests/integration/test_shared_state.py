"""Durable shared state (ctx.state): compare-and-swap writes that lose nothing."""

from __future__ import annotations

import asyncio

import pytest

from pyweft import (
    Engine,
    InvalidArgumentError,
    MemoryStorage,
    StateConflictError,
    VirtualClock,
    WorkflowContext,
    workflow,
)
from support.backends import Backend
from support.poll import eventually


@workflow(name="bump")
async def bump(ctx: WorkflowContext) -> int:
    counter = ctx.state("counter", scope="workflow", initial=0)
    value: int = await counter.update(lambda n: n + 1, max_retries=200)
    return value


async def test_fifty_concurrent_runs_incrementing_one_counter_lose_nothing(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[bump]) as engine:
        handles = await asyncio.gather(*(engine.start(bump) for _ in range(50)))
        results = await asyncio.gather(*(h.result(timeout=30) for h in handles))
        assert sorted(results) == list(range(1, 51))  # every increment saw a distinct value
        assert await engine.get_state("counter", workflow_type="bump") == 50


@workflow(name="family")
async def family(ctx: WorkflowContext) -> list[object]:
    notes = ctx.state("notes", initial=[])
    await notes.set(["parent"])
    await ctx.start_child(family_child)
    seen = await notes.get()
    await notes.delete()
    return [seen, await notes.get()]


@workflow(name="family_child")
async def family_child(ctx: WorkflowContext) -> None:
    await ctx.state("notes", initial=[]).update(lambda xs: [*xs, "child"])


async def test_run_scoped_state_is_shared_with_children_and_deleted_with_the_owner() -> None:
    async with Engine(MemoryStorage(), workflows=[family, family_child], clock=VirtualClock()) as e:
        handle = await e.start(family, id="fam")
        assert await handle.result(timeout=10) == [["parent", "child"], []]
        await e.state.set("extra", {"k": 1}, workflow_id="fam")
        assert await e.state.list(workflow_id="fam") == {"extra": {"k": 1}}
        assert await e.purge(status="completed") >= 1
        assert await e.state.list(workflow_id="fam") == {}


@workflow(name="reader")
async def reader(ctx: WorkflowContext) -> list[int]:
    seen = []
    for _ in range(2):
        seen.append(await ctx.state("level", scope="workflow", initial=-1).get())
        await ctx.sleep("1h")
    return seen


async def test_a_read_is_recorded_so_replay_returns_what_the_live_read_saw(
    backend: Backend,
) -> None:
    def sleeping() -> bool:
        return backend.clock.pending_timers() == 1

    async with backend.engine(workflows=[reader]) as engine:
        await engine.state.set("level", 1, workflow_type="reader")
        await engine.start(reader, id="r")
        await eventually(sleeping, what="the first sleep")
    async with backend.engine(workflows=[reader]) as engine:  # a restart replays the read
        await engine.state.set("level", 2, workflow_type="reader")
        await eventually(sleeping, what="the first sleep, re-armed")
        backend.clock.advance(3600)
        await eventually(lambda: backend.clock.next_deadline() == backend.clock.now() + 3600)
        backend.clock.advance(3600)
        assert await engine.get_handle("r").result(timeout=10) == [1, 2]


@workflow(name="contested")
async def contested(ctx: WorkflowContext) -> str:
    try:
        await ctx.state("hot", scope="workflow", initial=0).update(lambda n: n + 1, max_retries=0)
    except StateConflictError as exc:
        return f"conflict: {exc.name}"
    return "ok"


async def test_running_out_of_retries_raises_a_typed_error_that_replays_the_same() -> None:
    store = MemoryStorage()
    async with Engine(store, workflows=[contested], clock=VirtualClock()) as engine:
        # Every read sees a value that changes before the write lands.
        real_get = store.get
        busy = [False]

        async def racing_get(key: str) -> bytes | None:
            found = await real_get(key)
            if key.startswith("st:t:") and not busy[0]:
                busy[0] = True  # the operator's own read must not race itself
                try:
                    await engine.state.set("hot", 99, workflow_type="contested")
                finally:
                    busy[0] = False
            return found

        store.get = racing_get  # type: ignore[method-assign]
        try:
            handle = await engine.start(contested, id="c")
            assert await handle.result(timeout=10) == "conflict: hot"
        finally:
            store.get = real_get  # type: ignore[method-assign]
        history = await engine.history("c")
        failed = [s for s in history.steps if s.kind == "state"]
        assert failed[0].status == "failed"
        assert failed[0].error is not None and failed[0].error.type == "StateConflictError"


async def test_bad_state_arguments_are_refused() -> None:
    async with Engine(MemoryStorage(), workflows=[bump], clock=VirtualClock()) as engine:
        with pytest.raises(InvalidArgumentError, match="exactly one of"):
            await engine.get_state("x")
        with pytest.raises(InvalidArgumentError, match="exactly one of"):
            await engine.state.get("x", workflow_id="a", workflow_type="b")
        with pytest.raises(InvalidArgumentError):
            await engine.state.get("", workflow_type="bump")
