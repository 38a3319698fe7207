"""Queries asked through an engine that does not drive the run go to the one that does."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest

from pyweft import (
    QueryFailedError,
    QueryNotFoundError,
    QueryUnavailableError,
    WorkflowContext,
    workflow,
)
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.records import QueryRequest
from pyweft.storage import Put
from support.backends import Backend
from support.poll import eventually


@dataclasses.dataclass
class Line:
    sku: str
    price: Decimal


@workflow(name="till")
async def till(ctx: WorkflowContext) -> int:
    lines: list[Line] = []

    @ctx.on_query("lines")
    def get_lines() -> list[Line]:
        return list(lines)

    @ctx.on_query("priced")
    def priced(line: Line, times: int) -> str:
        return f"{line.sku} x{times} = {line.price * times}"

    @ctx.on_query("broken")
    def broken() -> None:
        raise ValueError("no such thing")

    ctx.on_update("add", lambda line: lines.append(line))
    await ctx.wait_for_signal("close")
    return len(lines)


async def driven(engine: object, workflow_id: str) -> None:
    await eventually(lambda: engine.is_running_here(workflow_id), what="driven")  # type: ignore[attr-defined]


async def test_a_query_through_another_engine_is_answered_by_the_owner(backend: Backend) -> None:
    async with backend.engine(workflows=[till], poll_interval=0.02) as owner:
        handle = await owner.start(till, id="till-1")
        await driven(owner, handle.id)
        await owner.update(handle.id, "add", Line("tea", Decimal("2.50")))
        async with backend.engine(workflows=[till], role="client") as asker:
            assert not asker.is_running_here(handle.id)
            # Arguments and answers cross the store through the payload codec.
            assert await asker.query(handle.id, "lines") == [{"sku": "tea", "price": "2.50"}]
            answer = await asker.query(handle.id, "priced", Line("cake", Decimal("3.10")), 3)
            assert answer == "cake x3 = 9.30"
            with pytest.raises(QueryNotFoundError) as missing:
                await asker.query(handle.id, "nope")
            assert "lines" in str(missing.value) and missing.value.query == "nope"
            with pytest.raises(QueryFailedError) as failed:
                await asker.query(handle.id, "broken")
            assert (failed.value.error_type, failed.value.error_message) == (
                "ValueError",
                "no such thing",
            )
            # Every question and answer is cleaned up.
            assert await asker.storage.scan("qry:") == []
            assert await asker.storage.scan("qrs:") == []
            await asker.signal(handle.id, "close")
        assert await handle.result(timeout=5) == 1
        async with backend.engine(workflows=[till], role="client") as asker:
            # Finished: the asker replays its journal to answer (issue 16).
            assert await asker.query(handle.id, "lines") == [{"sku": "tea", "price": "2.50"}]


async def test_with_nobody_to_answer_the_asker_gets_unavailable_and_writes_nothing_lasting(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[till], poll_interval=0.02) as owner:
        handle = await owner.start(till, id="till-2")
        await driven(owner, handle.id)
        await owner.suspend(handle.id)
        with pytest.raises(QueryUnavailableError, match="suspended"):
            await owner.query(handle.id, "lines", timeout=0.1)
        await owner.resume(handle.id)
    # The run is running but no engine drives it now.
    async with backend.engine(workflows=[till], role="client") as asker:
        before = await asker.storage.scan("")
        with pytest.raises(QueryUnavailableError, match=r"within 0\.1s"):
            await asker.query(handle.id, "lines", timeout="100ms")
        left = {k for k, _ in await asker.storage.scan("")} - {k for k, _ in before}
        assert {k for k in left if not k.startswith("wake:")} == set()


async def test_a_question_left_by_an_asker_that_gave_up_is_answered_and_purged_later(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[till], role="client") as asker:
        async with backend.engine(workflows=[till], poll_interval=0.02) as owner:
            handle = await owner.start(till, id="till-3")
            await driven(owner, handle.id)
        # Nobody drives it; recovery by the next owner answers a question still stored.
        request = records.encode(QueryRequest("orphan", "lines", b"\x90", 0.0))
        await asker.storage.batch([Put(key=keys.query_request(handle.id, "orphan"), value=request)])
        await asker.storage.batch([Put(key=keys.wake(handle.id), value=b"w")])
    async with backend.engine(workflows=[till], poll_interval=0.02) as owner:

        async def answered() -> bool:
            return bool(await owner.storage.scan("qrs:"))

        await eventually(answered, what="the orphaned question answered")
        assert await owner.storage.scan("qry:") == []
        await owner.signal(handle.id, "close")
        assert await owner.get_handle(handle.id).result(timeout=5) == 0
        assert await owner.purge(workflow_type="till") == 1
        assert await owner.storage.scan("qrs:") == []


async def test_an_asker_cancelled_while_it_waits_takes_its_question_back(
    backend: Backend,
) -> None:
    import asyncio

    async with backend.engine(workflows=[till], poll_interval=0.02) as owner:
        handle = await owner.start(till, id="till-4")
        await driven(owner, handle.id)
    # Nobody drives it now: the question waits, until its asker gives up (a client gone).
    async with backend.engine(workflows=[till], role="client") as asker:
        asking = asyncio.create_task(asker.query(handle.id, "lines", timeout=30))

        async def asked() -> bool:
            return bool(await asker.storage.scan("qry:"))

        await eventually(asked, what="the question stored")
        asking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asking
        assert await asker.storage.scan("qry:") == []
        assert await asker.storage.scan("qrs:") == []
