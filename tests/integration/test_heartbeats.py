"""Heartbeats: per-step details for retries, durable and throttled, and heartbeat timeouts."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from pyweft import (
    ActivityError,
    Engine,
    MemoryStorage,
    PayloadError,
    RetryPolicy,
    WorkflowContext,
    activity,
    activity_context,
    workflow,
)
from pyweft.storage.base import Expect, Op, Put
from support.backends import Backend
from support.poll import eventually

seen: list[tuple[str, int, Any]] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    seen.clear()


@activity(retry=RetryPolicy(max_attempts=3, initial_interval=5))
async def batch(name: str, fail_at: int) -> int:
    ctx = activity_context()
    seen.append((name, ctx.attempt, ctx.last_heartbeat_details))
    start = ctx.last_heartbeat_details or 0
    for item in range(start, 6):
        if ctx.attempt == 1 and item == fail_at:
            raise RuntimeError(f"{name} failed at item {item}")
        ctx.heartbeat(item + 1)  # items done so far
        await asyncio.sleep(0)
    return start


@workflow(name="batched")
async def batched(ctx: WorkflowContext) -> list[int]:
    return list(await ctx.all(ctx.run(batch, "a", 2), ctx.run(batch, "b", 4)))


async def test_a_retry_resumes_from_its_own_step_details_never_a_siblings(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[batched]) as engine:
        handle = await engine.start(batched, id="batched-1")
        await eventually(lambda: backend.clock.pending_timers() == 2, what="both backoffs")
        backend.clock.advance(5)
        assert await handle.result(timeout=5) == [2, 4]
        history = await engine.history("batched-1")
    assert sorted(seen) == [("a", 1, None), ("a", 2, 2), ("b", 1, None), ("b", 2, 4)]
    assert [s.status for s in history.steps] == ["completed"] * len(history.steps)
    assert all(s.heartbeat_details is None for s in history.steps)  # cleared on success


gate = threading.Event()


@activity(heartbeat_throttle="1s")
def long_copy() -> int:
    ctx = activity_context()
    seen.append(("copy", ctx.attempt, ctx.last_heartbeat_details))
    done = ctx.last_heartbeat_details or 0
    ctx.heartbeat(done + 3)
    while not ctx.cancelled and not gate.wait(0.005):
        pass
    return done


@workflow(name="copying")
async def copying(ctx: WorkflowContext) -> int:
    return await ctx.run(long_copy)


async def step_details(engine: Any, workflow_id: str) -> Any:
    history = await engine.history(workflow_id)
    return {s.step: s.heartbeat_details for s in history.steps if s.status == "open"}


async def test_details_survive_a_restart_and_show_in_describe_and_history(
    backend: Backend,
) -> None:
    gate.clear()
    async with backend.engine(workflows=[copying]) as engine:
        await engine.start(copying, id="copy-1")

        async def stored() -> bool:
            return await step_details(engine, "copy-1") == {1: 3}

        await eventually(stored, what="details stored")
        info = await engine.describe("copy-1")
        assert info.heartbeats == {1: 3}
        (step,) = (await engine.history("copy-1")).steps
        assert (step.status, step.heartbeat_details) == ("open", 3)
        assert step.heartbeat_at is not None
    # The engine stopped mid-attempt: the next one, in a new engine, resumes from 3.
    async with backend.engine(workflows=[copying]) as engine:
        await eventually(lambda: len(seen) == 2, what="the retry")
        gate.set()
        assert await engine.get_handle("copy-1").result(timeout=5) == 3
        assert (await engine.describe("copy-1")).heartbeats == {}
    assert seen == [("copy", 1, None), ("copy", 1, 3)]


class CountingStorage(MemoryStorage):
    """Counts writes of open-step records (where heartbeat details are stored)."""

    def __init__(self) -> None:
        super().__init__()
        self.detail_writes = 0

    async def conditional_batch(self, conditions: list[Expect], ops: list[Op]) -> bool:  # type: ignore[override]
        if any(isinstance(op, Put) and ":p:" in op.key for op in ops):
            self.detail_writes += 1
        return await super().conditional_batch(conditions, ops)


events: dict[str, asyncio.Event] = {}  # made per test: an Event belongs to one loop


@activity(heartbeat_throttle="10s")
async def tight_loop() -> str:
    ctx = activity_context()
    for i in range(10_000):
        ctx.heartbeat({"i": i})
    await events["proceed"].wait()
    for i in range(10_000, 20_000):
        ctx.heartbeat({"i": i})
    await events["finish"].wait()
    return "done"


@workflow(name="tight")
async def tight(ctx: WorkflowContext) -> str:
    return await ctx.run(tight_loop)


async def test_a_tight_loop_writes_at_most_once_per_throttle_interval(backend: Backend) -> None:
    events.update(proceed=asyncio.Event(), finish=asyncio.Event())
    storage = CountingStorage()
    async with Engine(storage, workflows=[tight], clock=backend.clock) as engine:
        handle = await engine.start(tight, id="tight-1")
        await eventually(lambda: storage.detail_writes == 1, what="the first write")

        async def shows(i: int) -> bool:
            return await step_details(engine, "tight-1") == {1: {"i": i}}

        # Written as soon as the loop got to it, with the latest value given by then.
        assert await shows(9_999)
        events["proceed"].set()
        await eventually(lambda: backend.clock.pending_timers() == 1, what="throttle timer")
        assert storage.detail_writes == 1 and await shows(9_999)  # 10,000 more calls wait
        backend.clock.advance(10)
        await eventually(lambda: shows(19_999), what="the latest value, one interval later")
        assert storage.detail_writes == 2
        events["finish"].set()
        assert await handle.result(timeout=5) == "done"
    assert storage.detail_writes == 2  # the attempt succeeded: nothing left to carry


@activity(heartbeat_timeout="10s", retry=RetryPolicy(max_attempts=2, initial_interval=1))
async def goes_silent() -> Any:
    ctx = activity_context()
    seen.append(("silent", ctx.attempt, ctx.last_heartbeat_details))
    ctx.heartbeat("started")
    if ctx.attempt == 1:
        await asyncio.Event().wait()  # never heartbeats again
    return ctx.last_heartbeat_details


@workflow(name="silent")
async def silent(ctx: WorkflowContext) -> Any:
    return await ctx.run(goes_silent)


async def test_an_attempt_that_stops_heartbeating_times_out_and_is_retried(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[silent]) as engine:
        handle = await engine.start(silent, id="silent-1")
        await eventually(lambda: len(seen) == 1, what="first attempt")
        backend.clock.advance(9)
        await asyncio.sleep(0)
        assert len(seen) == 1  # 9s of silence is within the timeout
        backend.clock.advance(1)
        await eventually(lambda: backend.clock.pending_timers() >= 1, what="the backoff")
        history = await engine.history("silent-1")
        (step,) = history.steps
        assert step.error is not None and step.error.type == "ActivityTimeoutError"
        assert "heartbeat" in step.error.message
        backend.clock.advance(1)
        assert await handle.result(timeout=5) == "started"
    assert [a for _, a, _ in seen] == [1, 2]


@activity(
    heartbeat_timeout="5s", timeout="12s", retry=RetryPolicy(max_attempts=1), cancel_grace="1s"
)
def keeps_beating() -> None:
    ctx = activity_context()
    while True:
        ctx.heartbeat()  # raises ActivityCancelledError once the attempt timeout fires
        threading.Event().wait(0.002)


@workflow(name="beating")
async def beating(ctx: WorkflowContext) -> str:
    try:
        await ctx.run(keeps_beating)
    except ActivityError as err:
        return f"{err.error_type}: {err.error_message}"
    return "returned"


async def test_heartbeating_does_not_extend_the_attempt_timeout(backend: Backend) -> None:
    async with backend.engine(workflows=[beating]) as engine:
        handle = await engine.start(beating, id="beating-1")
        for _ in range(6):  # 12s in 2s steps, heartbeating all along
            await eventually(lambda: backend.clock.pending_timers() >= 2, what="timers armed")
            backend.clock.advance(2)
            await asyncio.sleep(0.01)
        result = await handle.result(timeout=5)
    assert result.startswith("ActivityTimeoutError: ")
    assert "timed out after 12.000s" in result


@activity(retry=RetryPolicy(max_attempts=1))
async def bad_details() -> str:
    ctx = activity_context()
    ctx.heartbeat(object())  # cannot be encoded: reported at the next heartbeat
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    try:
        ctx.heartbeat(1)
    except PayloadError as err:
        return f"PayloadError: {err}"
    return "accepted"


@workflow(name="bad_beats")
async def bad_beats(ctx: WorkflowContext) -> str:
    return await ctx.run(bad_details)


async def test_details_that_cannot_be_stored_raise_payload_error_at_the_next_heartbeat(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[bad_beats]) as engine:
        result = await (await engine.start(bad_beats, id="bad-1")).result(timeout=5)
    assert result.startswith("PayloadError: heartbeat details")


@activity(heartbeat_throttle="5s", cancel_grace="1s")
async def beats_on_request() -> None:
    ctx = activity_context()
    n = 0
    while True:
        await events["beat"].wait()
        events["beat"].clear()
        n += 1
        ctx.heartbeat(n)


@workflow(name="fenced_beats")
async def fenced_beats(ctx: WorkflowContext) -> None:
    await ctx.run(beats_on_request)


@pytest.mark.filterwarnings("ignore::pyweft.LeaseLostWarning")
async def test_a_deposed_engine_cannot_store_heartbeat_details(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from pyweft import VirtualClock
    from pyweft.engine.ownership.lease import EPOCH_KEY, decode_epoch, encode_epoch
    from pyweft.storage.base import Put as PutOp

    events.update(beat=asyncio.Event())
    clock = VirtualClock()
    url = f"sqlite:///{tmp_path / 'engine.db'}"
    async with Engine(
        url,
        workflows=[fenced_beats],
        clock=clock,
        ownership="lease",
        lease_ttl=600,
        lease_renew_interval=300,  # no renewal notices the takeover first: the write must
    ) as engine:
        await engine.start(fenced_beats, id="fenced-1")
        events["beat"].set()

        async def details() -> Any:
            return (await engine.describe("fenced-1")).heartbeats

        await eventually(lambda: _equals(details(), {1: 1}), what="first details stored")
        # Another engine takes the store over: the lease epoch moves on.
        epoch = decode_epoch(await engine.storage.get(EPOCH_KEY) or b"")
        await engine.storage.batch([PutOp(key=EPOCH_KEY, value=encode_epoch(epoch + 1))])
        events["beat"].set()
        await eventually(lambda: clock.pending_timers() >= 1, what="throttle timer")
        clock.advance(5)  # the fenced write of details 2 is refused
        await eventually(
            lambda: any("a fenced write found a newer" in r.getMessage() for r in caplog.records),
            what="the engine deposed by its own heartbeat write",
        )
    async with Engine(url, role="client") as reader:
        assert (await reader.describe("fenced-1")).heartbeats == {1: 1}


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)
