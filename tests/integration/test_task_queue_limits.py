"""Activity queue limits across workers: global concurrency and rate, and their bad input."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest

from pyweft import InvalidArgumentError, SystemClock, Worker, WorkflowContext, activity, workflow
from support.backends import Backend

running: list[int] = [0]
peak: list[int] = [0]
starts: list[float] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    running[0] = peak[0] = 0
    starts.clear()


@activity(queue="api")
async def call_api(x: int) -> int:
    starts.append(time.monotonic())
    running[0] += 1
    peak[0] = max(peak[0], running[0])
    try:
        await asyncio.sleep(0.03)
    finally:
        running[0] -= 1
    return x


@workflow
async def fan(ctx: WorkflowContext, n: int) -> list[int]:
    return list(await ctx.all(*(ctx.run(call_api, i) for i in range(n))))


def engine(backend: Backend) -> Any:
    return backend.engine(
        workflows=[fan], activities=[call_api], clock=SystemClock(), serve_queues=[]
    )


def workers(backend: Backend, n: int) -> list[Worker]:
    return [
        Worker(backend.storage(), activities=[call_api], queues=["api"], poll_interval=0.02)
        for _ in range(n)
    ]


async def test_a_global_concurrency_limit_holds_across_workers(backend: Backend) -> None:
    async with engine(backend) as eng:
        limits = await eng.set_activity_queue_limits("api", concurrency=2)
        assert limits.concurrency == 2
        assert await eng.activity_queue_limits("api") == limits
        ws = workers(backend, 2)  # 16 slots between them; the queue allows 2
        for w in ws:
            await w.start()
        try:
            assert await (await eng.start(fan, 10, id="c1")).result(timeout=20) == list(range(10))
        finally:
            for w in ws:
                await w.stop()
        assert peak[0] == 2
        assert await eng._core.storage.scan("tk:sc:") == []  # every slot given back


async def test_a_rate_limit_holds_in_every_window(backend: Backend) -> None:
    async with engine(backend) as eng:
        await eng.set_activity_queue_limits("api", rate_limit=(3, "0.3s"))
        ws = workers(backend, 2)
        for w in ws:
            await w.start()
        try:
            assert await (await eng.start(fan, 7, id="r1")).result(timeout=20) == list(range(7))
        finally:
            for w in ws:
                await w.stop()
        starts.sort()
        assert len(starts) == 7
        for i in range(len(starts) - 3):  # any 4 consecutive starts span a full window
            assert starts[i + 3] - starts[i] >= 0.3 - 0.02
        await eng.set_activity_queue_limits("api")  # no limits: removed
        assert await eng.activity_queue_limits("api") is None


async def test_a_worker_held_back_by_a_rate_limit_claims_when_its_window_frees(
    backend: Backend,
) -> None:
    """Not at its next poll (here a minute away): when the oldest start of the window
    leaves it, with no ring to say so."""
    async with engine(backend) as eng:
        await eng.set_activity_queue_limits("api", rate_limit=(3, "0.2s"))
        worker = Worker(backend.storage(), activities=[call_api], queues=["api"], poll_interval=60)
        async with worker:
            assert await (await eng.start(fan, 9, id="w1")).result(timeout=20) == list(range(9))
        starts.sort()
        for i in range(len(starts) - 3):
            assert starts[i + 3] - starts[i] >= 0.2 - 0.02


@pytest.mark.parametrize(
    ("concurrency", "rate_limit", "message"),
    [
        (0, None, "concurrency must be an int"),
        (-1, None, "concurrency must be an int"),
        (2.5, None, "concurrency must be an int"),
        (None, (0, "1s"), "starts must be an int"),
        (None, (5, math.nan), "NaN"),
        (None, (5, "0s"), "at least 0.001s"),
        (None, (5, 0.0001), "at least 0.001s"),
        (None, 5, "must be \\(starts, window\\)"),
    ],
)
async def test_bad_limits_are_refused_and_nothing_is_stored(
    backend: Backend, concurrency: Any, rate_limit: Any, message: str
) -> None:
    async with engine(backend) as eng:
        with pytest.raises(InvalidArgumentError, match=message):
            await eng.set_activity_queue_limits(
                "api", concurrency=concurrency, rate_limit=rate_limit
            )
        with pytest.raises(InvalidArgumentError, match="queue name"):
            await eng.set_activity_queue_limits("no such/queue", concurrency=1)
        assert await eng.activity_queue_limits("api") is None
