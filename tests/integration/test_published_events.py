"""Published events and streams: durable, exactly once under replay, read while written."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyweft import (
    InvalidArgumentError,
    WorkflowContext,
    WorkflowNotFoundError,
    WorkflowUsageError,
    workflow,
)
from support.backends import Backend
from support.poll import eventually


@workflow
async def publisher(ctx: WorkflowContext, n: int) -> str:
    await ctx.set_event("status", "starting")
    out = ctx.stream("tokens")
    for i in range(n):
        await out.write({"i": i})
    await ctx.set_event("status", "streamed")
    await ctx.wait_for_signal("finish")
    await out.close()
    await ctx.set_event("status", "done")
    return "ok"


@workflow
async def silent(ctx: WorkflowContext) -> None:
    await ctx.wait_for_signal("go")


@workflow
async def races_a_write(ctx: WorkflowContext) -> str:
    try:
        await ctx.race(ctx.stream("s").write("x"), ctx.sleep(60))
    except WorkflowUsageError as exc:
        return str(exc)
    return "raced"


@workflow
async def continues(ctx: WorkflowContext, generation: int) -> None:
    await ctx.stream("s").write(generation)
    if generation < 2:
        await ctx.continue_as_new(generation + 1)
    await ctx.stream("s").close()


@workflow
async def writes_then_ends(ctx: WorkflowContext) -> None:
    await ctx.stream("s").write("a")
    await ctx.stream("s").write(None)  # a None chunk is a chunk like any other


async def test_event_waits_for_its_first_value_and_last_write_wins(backend: Backend) -> None:
    async with backend.engine(workflows=[publisher]) as engine:
        handle = await engine.start(publisher, 3, id="p")
        assert await engine.get_event("p", "status", timeout=5) in ("starting", "streamed")
        chunks = []
        async for chunk in engine.read_stream("p", "tokens"):
            chunks.append(chunk)
            if len(chunks) == 3:
                break
        assert chunks == [{"i": 0}, {"i": 1}, {"i": 2}]
        await handle.signal("finish")
        assert await handle.result(timeout=5) == "ok"
        assert await engine.get_event("p", "status", timeout=0) == "done"
        kinds = [s.kind for s in await handle.history()]
    assert kinds.count("stream") == 3 and kinds.count("stream_close") == 1
    assert kinds.count("event") == 3


async def test_reader_started_before_the_writes_follows_until_close(backend: Backend) -> None:
    async with backend.engine(workflows=[publisher]) as engine:
        handle = await engine.start(publisher, 5, id="p")

        async def read_all() -> list[Any]:
            return [c async for c in engine.read_stream("p", "tokens")]

        reader = asyncio.ensure_future(read_all())
        await asyncio.sleep(0)
        assert await engine.get_event("p", "status", timeout=5) is not None
        await handle.signal("finish")
        assert await asyncio.wait_for(reader, 5) == [{"i": i} for i in range(5)]
        from_three = [c async for c in engine.read_stream("p", "tokens", from_offset=3)]
        assert from_three == [{"i": 3}, {"i": 4}]


async def test_stream_of_a_finished_run_ends_after_its_chunks(backend: Backend) -> None:
    async with backend.engine(workflows=[writes_then_ends]) as engine:
        handle = await engine.start(writes_then_ends, id="w")
        await handle.result(timeout=5)
        assert [c async for c in engine.read_stream("w", "s")] == ["a", None]
        assert [c async for c in engine.read_stream("w", "never-written")] == []


async def test_event_of_a_run_that_finished_without_it_is_none_at_once(backend: Backend) -> None:
    async with backend.engine(workflows=[writes_then_ends, silent]) as engine:
        await (await engine.start(writes_then_ends, id="w")).result(timeout=5)
        assert await engine.get_event("w", "status", timeout=3600) is None
        await engine.start(silent, id="s")
        assert await engine.get_event("s", "status", timeout=0.05) is None


async def test_writes_are_not_repeated_when_the_run_is_replayed(backend: Backend) -> None:
    async with backend.engine(workflows=[publisher]) as engine:
        await engine.start(publisher, 4, id="p")
        assert await engine.get_event("p", "status", timeout=5) is not None
        for _ in range(100):
            if await engine.get_event("p", "status", timeout=0) == "streamed":
                break
            await asyncio.sleep(0.01)
    async with backend.engine(workflows=[publisher]) as engine:  # replays the run
        handle = engine.get_handle("p")
        await handle.signal("finish")
        assert await handle.result(timeout=5) == "ok"
        chunks = [c async for c in engine.read_stream("p", "tokens")]
    assert chunks == [{"i": i} for i in range(4)]


async def test_bad_input_is_refused_with_a_clear_error(backend: Backend) -> None:
    async with backend.engine(workflows=[silent]) as engine:
        await engine.start(silent, id="s")
        with pytest.raises(InvalidArgumentError, match="from_offset"):
            engine.read_stream("s", "k", from_offset=-1)
        with pytest.raises(InvalidArgumentError, match="stream key"):
            engine.read_stream("s", "")
        with pytest.raises(InvalidArgumentError, match="event key"):
            await engine.get_event("s", "", timeout=0)
        with pytest.raises(WorkflowNotFoundError):
            await engine.get_event("nope", "k", timeout=0)
        with pytest.raises(WorkflowNotFoundError):
            [c async for c in engine.read_stream("nope", "k")]


async def test_purge_deletes_the_runs_events_and_streams(backend: Backend) -> None:
    async with backend.engine(workflows=[publisher, writes_then_ends]) as engine:
        handle = await engine.start(writes_then_ends, id="w")
        await handle.result(timeout=5)
        assert await engine.purge(workflow_type="writes_then_ends") == 1
        storage = engine._core.storage
        assert await storage.scan("pub:") == []
        with pytest.raises(WorkflowNotFoundError):
            [c async for c in engine.read_stream("w", "s")]


async def test_many_readers_of_one_stream_each_get_every_chunk(backend: Backend) -> None:
    async with backend.engine(workflows=[publisher]) as engine:
        handle = await engine.start(publisher, 60, id="p")

        async def read_all() -> list[Any]:
            return [c async for c in engine.read_stream("p", "tokens")]

        readers = [asyncio.ensure_future(read_all()) for _ in range(6)]
        await asyncio.sleep(0)
        assert await engine.get_event("p", "status", timeout=5) is not None

        async def streamed() -> bool:
            return await engine.get_event("p", "status", timeout=0) == "streamed"

        await eventually(streamed, what="every chunk written")
        await handle.signal("finish")
        results = await asyncio.wait_for(asyncio.gather(*readers), 10)
    assert results == [[{"i": i} for i in range(60)]] * 6


async def test_stream_continues_its_offsets_across_continue_as_new(backend: Backend) -> None:
    async with backend.engine(workflows=[continues]) as engine:
        handle = await engine.start(continues, 0, id="c")
        await handle.result(timeout=5)
        assert [c async for c in engine.read_stream("c", "s")] == [0, 1, 2]


async def test_a_stream_write_cannot_be_a_race_branch(backend: Backend) -> None:
    async with backend.engine(workflows=[races_a_write]) as engine:
        result = await (await engine.start(races_a_write, id="r")).result(timeout=5)
    assert "cannot be a branch of ctx.race" in result


@workflow
async def closes_twice(ctx: WorkflowContext) -> str:
    out = ctx.stream("s")
    await out.write(1)
    await out.close()
    await out.close()
    try:
        await out.write(2)
    except WorkflowUsageError as exc:
        return str(exc)
    return "wrote"


async def test_closing_twice_is_harmless_and_a_closed_stream_refuses_writes(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[closes_twice]) as engine:
        handle = await engine.start(closes_twice, id="c2")
        assert "is closed" in await handle.result(timeout=5)
        assert [c async for c in engine.read_stream("c2", "s")] == [1]
        kinds = [s.kind for s in await handle.history()]
    assert kinds == ["stream", "stream_close", "stream_close"]
