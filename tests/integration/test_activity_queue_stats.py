"""``engine.activity_queues()``: what waits on each activity task queue, what runs, and who
serves it, read from the task and worker records (memory, SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyweft import (
    ActivityQueueInfo,
    InvalidArgumentError,
    SystemClock,
    Worker,
    WorkflowContext,
    activity,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

release = asyncio.Event()


@activity(queue="media")
async def held(x: int) -> int:
    await asyncio.wait_for(release.wait(), 10)
    return x


@activity(queue="mail")
async def send(x: int) -> int:
    return x


@workflow
async def fan(ctx: WorkflowContext, n: int) -> list[int]:
    return list(await ctx.all(*[ctx.run(held, i) for i in range(n)], ctx.run(send, 0)))


@pytest.fixture(autouse=True)
def _fresh_event() -> None:
    global release
    release = asyncio.Event()


def by_name(items: list[ActivityQueueInfo]) -> dict[str, ActivityQueueInfo]:
    return {q.name: q for q in items}


async def test_it_counts_waiting_and_running_tasks_workers_and_limits(backend: Backend) -> None:
    engine: Any = backend.engine(
        workflows=[fan], activities=[held, send], clock=SystemClock(), serve_queues=[]
    )
    async with engine as eng:
        assert await eng.activity_queues() == []
        await eng.set_activity_queue_limits("media", concurrency=2, rate_limit=(100, "1s"))
        handle = await eng.start(fan, 3, id="f1")

        async def written() -> bool:
            return sum(q.waiting for q in await eng.activity_queues()) == 4

        await eventually(written, what="four tasks waiting")
        queues = by_name(await eng.activity_queues())
        assert sorted(queues) == ["mail", "media"]
        media = queues["media"]
        assert (media.waiting, media.in_flight, media.workers) == (3, 0, 0)
        assert media.oldest_waiting_s is not None and media.oldest_waiting_s >= 0
        assert media.limits is not None and media.limits.concurrency == 2
        assert queues["mail"].limits is None
        worker = Worker(
            backend.storage(),
            activities=[held],
            queues=["media"],
            poll_interval=0.05,
            heartbeat_interval=0.1,
        )
        async with worker:

            async def two_running() -> bool:
                media = by_name(await eng.activity_queues())["media"]
                return media.in_flight == 2 and media.waiting == 1

            await eventually(two_running, what="two of three held (the queue's limit)")
            [only] = await eng.activity_queues("media")
            assert (only.name, only.workers, only.draining_workers) == ("media", 1, 0)
            await eng.drain_worker(worker.id)

            async def draining() -> bool:
                [media] = await eng.activity_queues("media")
                return media.draining_workers == 1 and media.workers == 0

            await eventually(draining, what="the worker seen draining")
            await eng.resume_worker(worker.id)
            release.set()
            async with Worker(backend.storage(), activities=[send], queues=["mail"]):
                assert await handle.result(timeout=10) == [0, 1, 2, 0]
        [mail] = await eng.activity_queues("mail")  # asked for by name: shown, even idle
        assert (mail.waiting, mail.in_flight, mail.oldest_waiting_s) == (0, 0, None)


async def test_a_bad_queue_name_is_a_typed_error(backend: Backend) -> None:
    async with backend.engine(workflows=[fan], activities=[held, send]) as eng:
        with pytest.raises(InvalidArgumentError, match="queue"):
            await eng.activity_queues("no spaces allowed")
