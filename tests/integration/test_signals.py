"""Signals: buffered durably, consumed once in arrival order, idempotent by signal_id."""

from __future__ import annotations

import asyncio

import pytest

from pyweft import (
    Engine,
    InvalidArgumentError,
    MemoryStorage,
    PayloadError,
    StorageError,
    WaitTimeoutError,
    WorkflowContext,
    WorkflowNotFoundError,
    WorkflowTerminalError,
    workflow,
)
from pyweft.testing import FaultyStorage
from support.backends import Backend
from support.poll import eventually


@workflow
async def collector(ctx: WorkflowContext, count: int) -> list[object]:
    got = []
    for _ in range(count):
        got.append(await ctx.wait_for_signal("item"))
    return got


@workflow
async def patient(ctx: WorkflowContext) -> str:
    try:
        await ctx.wait_for_signal("go", timeout="1h")
    except WaitTimeoutError:
        return "timed out"
    return "went"


@workflow
async def quick(ctx: WorkflowContext) -> str:
    return "done"


async def test_signal_sent_before_wait_is_delivered_in_arrival_order(backend: Backend) -> None:
    async with backend.engine(workflows=[collector]) as engine:
        handle = await engine.start(collector, 3, id="c")
        for i in range(3):
            await engine.signal("c", "item", {"n": i})
        assert await handle.result(timeout=5) == [{"n": 0}, {"n": 1}, {"n": 2}]
        steps = await handle.history()
    assert [s.kind for s in steps] == ["signal"] * 3


async def test_signal_to_a_waiting_run_wakes_it(backend: Backend) -> None:
    async with backend.engine(workflows=[collector]) as engine:
        handle = await engine.start(collector, 1)
        await eventually(lambda: engine.is_running_here(handle.id), what="running")
        await asyncio.sleep(0.01)
        await handle.signal("item", "hello")
        assert await handle.result(timeout=5) == ["hello"]


async def test_buffered_signals_survive_restart_and_are_consumed_once(backend: Backend) -> None:
    async with backend.engine(workflows=[collector]) as engine:
        await engine.start(collector, 4, id="r")
        await engine.signal("r", "item", 1)
        await engine.signal("r", "item", 2)
        await eventually(lambda: _steps(engine, "r", 2), what="two signals consumed")
        await engine.signal("r", "item", 3)
    async with backend.engine(workflows=[collector]) as engine:
        await engine.signal("r", "item", 4)
        assert await engine.get_handle("r").result(timeout=5) == [1, 2, 3, 4]
        assert await engine.storage.scan("sig:") == []


async def _steps(engine: object, workflow_id: str, n: int) -> bool:
    return len(await engine.history(workflow_id)) >= n  # type: ignore[attr-defined]


async def test_signal_id_makes_sending_idempotent(backend: Backend) -> None:
    async with backend.engine(workflows=[collector]) as engine:
        handle = await engine.start(collector, 2, id="i")
        await asyncio.gather(
            *(engine.signal("i", "item", "once", signal_id="abc") for _ in range(20))
        )
        await engine.signal("i", "item", "twice", signal_id="def")
        await engine.signal("i", "item", "again", signal_id="abc")  # still a duplicate
        assert await handle.result(timeout=5) == ["once", "twice"]


async def test_resending_an_accepted_signal_id_after_the_run_ended_is_a_duplicate(
    backend: Backend,
) -> None:
    """A client retrying a send whose reply it lost must not fail because the run
    consumed the signal and finished meanwhile; a new signal_id still fails."""
    async with backend.engine(workflows=[collector]) as engine:
        handle = await engine.start(collector, 1, id="ended")
        await engine.signal("ended", "item", "only", signal_id="order-7")
        assert await handle.result(timeout=5) == ["only"]
        await engine.signal("ended", "item", "only", signal_id="order-7")  # no error
        with pytest.raises(WorkflowTerminalError):
            await engine.signal("ended", "item", "new", signal_id="order-8")
        with pytest.raises(WorkflowTerminalError):
            await engine.signal("ended", "item", "unkeyed")


async def test_a_retry_of_a_send_whose_reply_was_lost_succeeds_after_the_run_ended() -> None:
    faults = FaultyStorage(MemoryStorage())
    async with Engine(faults, workflows=[collector]) as engine:
        handle = await engine.start(collector, 1, id="lost")
        faults.fail_nth_write(
            match=lambda ops: any(":s:" in op.key or "sig" in op.key for op in ops),
            outcome_unknown=True,
        )
        with pytest.raises(StorageError):  # stored, but the sender cannot know
            await engine.signal("lost", "item", "paid", signal_id="pay-1")
        assert await handle.result(timeout=5) == ["paid"]
        await engine.signal("lost", "item", "paid", signal_id="pay-1")  # the retry: no error
        assert faults.counts.lost_replies == 1


async def test_signal_ids_with_separators_do_not_collide(backend: Backend) -> None:
    async with backend.engine(workflows=[collector]) as engine:
        handle = await engine.start(collector, 3, id="sep")
        for sid in ("a:b", "a%3Ab", "a/b"):
            await engine.signal("sep", "item", sid, signal_id=sid)
        assert await handle.result(timeout=5) == ["a:b", "a%3Ab", "a/b"]


async def test_signal_names_do_not_match_by_prefix(backend: Backend) -> None:
    @workflow(name="two_names")
    async def two_names(ctx: WorkflowContext) -> list[object]:
        first = await ctx.wait_for_signal("order")
        second = await ctx.wait_for_signal("order:placed")
        return [first, second]

    async with backend.engine(workflows=[two_names]) as engine:
        handle = await engine.start(two_names)
        await engine.signal(handle.id, "order:placed", "placed")
        await engine.signal(handle.id, "order", "order")
        assert await handle.result(timeout=5) == ["order", "placed"]


async def test_wait_for_signal_times_out_on_the_engine_clock(backend: Backend) -> None:
    async with backend.engine(workflows=[patient]) as engine:
        handle = await engine.start(patient, id="p")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="timeout armed")
    async with backend.engine(workflows=[patient]) as engine:  # the deadline survives
        await eventually(lambda: backend.clock.pending_timers() == 1, what="re-armed")
        backend.clock.advance(3600)
        assert await engine.get_handle("p").result(timeout=5) == "timed out"
    assert handle.id == "p"


async def test_wait_timeout_error_is_a_pyweft_and_timeout_error() -> None:
    assert issubclass(WaitTimeoutError, TimeoutError)


async def test_start_or_signal_creates_once_and_then_signals(backend: Backend) -> None:
    async with backend.engine(workflows=[collector]) as engine:
        results = await asyncio.gather(
            *(engine.start_or_signal(collector, 3, signal=("item", i), id="sos") for i in range(3))
        )
        kinds = sorted(kind for _, kind in results)
        assert kinds == ["signalled", "signalled", "started"]
        got = await engine.get_handle("sos").result(timeout=5)
        started = next(i for i, (_, kind) in enumerate(results) if kind == "started")
        assert got[0] == started  # the start signal is consumed first
        assert sorted(got) == [0, 1, 2]


async def test_bad_signals_are_rejected_and_store_nothing(backend: Backend) -> None:
    async with backend.engine(workflows=[collector, quick], max_payload_bytes=1000) as engine:
        done = await engine.start(quick)
        await done.result(timeout=5)
        await engine.start(collector, 1, id="bad")
        before = await engine.storage.scan("")
        with pytest.raises(WorkflowNotFoundError):
            await engine.signal("ghost", "item", 1)
        with pytest.raises(WorkflowTerminalError) as err:
            await engine.signal(done.id, "item", 1)
        assert err.value.code == "WorkflowTerminalError"
        with pytest.raises(PayloadError):
            await engine.signal("bad", "item", "x" * 2000)
        with pytest.raises(InvalidArgumentError):
            await engine.signal("bad", "item", 1, signal_id="")
        with pytest.raises(InvalidArgumentError):
            await engine.signal("bad", "item", 1, signal_id="é" * 65)  # 130 bytes
        with pytest.raises(InvalidArgumentError):
            await engine.signal("bad", "", 1)
        assert await engine.storage.scan("") == before
