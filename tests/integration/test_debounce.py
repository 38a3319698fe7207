"""engine.debounce: calls within the period collapse into one run with the latest arguments."""

from __future__ import annotations

import asyncio

import pytest

from pyweft import InvalidArgumentError, WorkflowContext, workflow
from support.backends import Backend


@workflow
async def index_doc(ctx: WorkflowContext, doc: str) -> str:
    return f"indexed {doc}"


@workflow
async def other(ctx: WorkflowContext, doc: str) -> str:
    return doc


async def test_calls_within_the_period_start_one_run_with_the_latest_arguments(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[index_doc]) as engine:
        first = await engine.debounce("doc-1", index_doc, "v1", period=10)
        backend.clock.advance(6)
        second = await engine.debounce("doc-1", index_doc, "v2", period=10)
        assert second.id == first.id
        backend.clock.advance(6)  # 12s after the first call, 6s after the last: not yet
        await asyncio.sleep(0.05)
        assert (await first.describe()).status == "pending"
        backend.clock.advance(5)
        assert await first.result(timeout=5) == "indexed v2"
        third = await engine.debounce("doc-1", index_doc, "v3", period=10)
        assert third.id != first.id  # the earlier run started: a new one collects calls
        assert (await third.describe()).status == "pending"


async def test_max_wait_bounds_how_long_calls_can_postpone_the_run(backend: Backend) -> None:
    async with backend.engine(workflows=[index_doc]) as engine:
        handle = await engine.debounce("k", index_doc, "a", period=10, max_wait=15)
        for doc, step in (("b", 5), ("c", 5), ("d", 4)):
            backend.clock.advance(step)
            assert (await engine.debounce("k", index_doc, doc, period=10, max_wait=15)).id == (
                handle.id
            )
        # Calls at 5, 10 and 14 s postponed it to the cap, 15 s after the first call (not
        # to 24 s); a call at exactly the cap would race the start, so none is made there.
        await asyncio.sleep(0.05)
        assert (await handle.describe()).status == "pending"
        backend.clock.advance(1)
        assert await handle.result(timeout=5) == "indexed d"


async def test_concurrent_callers_join_one_pending_run(backend: Backend) -> None:
    async with backend.engine(workflows=[index_doc]) as engine:
        handles = await asyncio.gather(
            *(engine.debounce("hot", index_doc, f"v{i}", period=30) for i in range(20))
        )
        assert len({h.id for h in handles}) == 1
        page = await engine.list(status="pending")
        assert [info.id for info in page.items] == [handles[0].id]
        backend.clock.advance(31)
        result = await handles[0].result(timeout=5)
        assert result.startswith("indexed v")


async def test_the_debounced_run_starts_after_a_restart(backend: Backend) -> None:
    async with backend.engine(workflows=[index_doc]) as engine:
        handle = await engine.debounce("r", index_doc, "one", period=60)
        await engine.debounce("r", index_doc, "two", period=60)
    backend.clock.advance(61)
    async with backend.engine(workflows=[index_doc]) as engine:
        assert await engine.get_handle(handle.id).result(timeout=5) == "indexed two"


async def test_bad_input_is_refused_and_changes_nothing(backend: Backend) -> None:
    async with backend.engine(workflows=[index_doc, other]) as engine:
        with pytest.raises(InvalidArgumentError, match="period"):
            await engine.debounce("k", index_doc, "a", period=0)
        with pytest.raises(InvalidArgumentError, match="max_wait"):
            await engine.debounce("k", index_doc, "a", period=10, max_wait=5)
        with pytest.raises(InvalidArgumentError, match="debounce key"):
            await engine.debounce("", index_doc, "a", period=10)
        assert (await engine.list()).items == []
        await engine.debounce("k", index_doc, "a", period=10)
        with pytest.raises(InvalidArgumentError, match="another key per workflow"):
            await engine.debounce("k", other, "a", period=10)
