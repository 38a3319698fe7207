"""Workflow queues: runs wait visibly as ``enqueued`` and start as limits allow."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pyweft import (
    Engine,
    Queue,
    QueueDeduplicatedError,
    WorkflowContext,
    activity,
    workflow,
)
from pyweft.engine.visibility.integrity import check_records
from support.backends import Backend
from support.poll import eventually

started: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    started.clear()


@activity
async def mark(name: str) -> str:
    started.append(name)
    return name


@workflow
async def held(ctx: WorkflowContext, name: str) -> str:
    """Starts (recording its name), then holds its slot until signalled."""
    await ctx.run(mark, name)
    await ctx.wait_for_signal("go")
    return name


@workflow
async def quick(ctx: WorkflowContext, name: str) -> str:
    return await ctx.run(mark, name)


def engine(backend: Backend, *queues: Queue, **kwargs: object) -> Engine:
    return backend.engine(workflows=[held, quick], activities=[mark], queues=list(queues), **kwargs)


async def statuses(engine: Engine) -> dict[str, int]:
    return {g.key: g.count for g in await engine.aggregate(group_by="status")}


async def test_runs_wait_enqueued_until_a_slot_frees(backend: Backend) -> None:
    queue = Queue("imports", concurrency=2)
    async with engine(backend, queue) as eng:
        events = eng.events()
        first = asyncio.ensure_future(events.__anext__())
        handles = [await eng.enqueue(queue, held, f"r{i}", id=f"r{i}") for i in range(4)]
        assert (await first).kind == "enqueued"
        await eventually(lambda: len(started) == 2, what="two runs started")
        assert started == ["r0", "r1"]
        waiting = await eng.describe("r2")
        assert (waiting.status, waiting.queue) == ("enqueued", "imports")
        assert [i.id for i in (await eng.list(status="enqueued")).items] == ["r2", "r3"] or {
            i.id for i in (await eng.list(status="enqueued")).items
        } == {"r2", "r3"}
        assert (await statuses(eng)) == {"running": 2, "enqueued": 2}
        info = await eng.queue_info("imports")
        assert (info.depth, info.in_flight, info.concurrency) == (2, 2, 2)
        await eng.signal("r0", "go")
        assert await handles[0].result(timeout=5) == "r0"
        await eventually(lambda: len(started) == 3, what="a third run started")
        await asyncio.sleep(0.05)
        assert len(started) == 3  # still two at once
        for name in ("r1", "r2", "r3"):
            await eventually(lambda n=name: n in started, what=f"{name} started")
            await eng.signal(name, "go")
        assert [await h.result(timeout=5) for h in handles] == ["r0", "r1", "r2", "r3"]
        info = await eng.queue_info("imports")
        assert (info.depth, info.in_flight) == (0, 0)
        # What `pyweft doctor` reads: every queue key is known and readable.
        check = await check_records(eng.storage)
        assert check.damaged == []
        assert not [k for k in check.unrecognised if k.startswith("wfq:")]


async def test_lower_priority_starts_first_and_fifo_within_a_priority(backend: Backend) -> None:
    queue = Queue("ranked", concurrency=1, priority=True)
    async with engine(backend, queue) as eng:
        await eng.enqueue(queue, held, "blocker", id="blocker")
        await eventually(lambda: started == ["blocker"], what="blocker started")
        for name, priority in (("p5", 5), ("p1a", 1), ("p1b", 1), ("p0", 0), ("none", None)):
            await eng.enqueue(queue, held, name, id=name, priority=priority)
        order = ["blocker", "p0", "none", "p1a", "p1b", "p5"]
        for i, name in enumerate(order):
            await eventually(lambda n=i: len(started) == n + 1, what=f"{name} started")
            assert started[-1] == name
            await eng.signal(name, "go")
        assert started == order


async def test_a_deduplication_id_is_refused_while_its_run_is_queued_or_running(
    backend: Backend,
) -> None:
    queue = Queue("dedup", concurrency=1)
    async with engine(backend, queue) as eng:
        await eng.enqueue(queue, held, "a", id="a", deduplication_id="order-7")
        with pytest.raises(QueueDeduplicatedError) as err:
            await eng.enqueue(queue, held, "b", id="b", deduplication_id="order-7")
        assert err.value.workflow_id == "a"
        assert err.value.code == "QueueDeduplicatedError"
        assert [i.id for i in (await eng.list()).items] == ["a"]  # nothing stored
        await eventually(lambda: started == ["a"], what="a started")
        with pytest.raises(QueueDeduplicatedError):  # running holds it too
            await eng.enqueue(queue, held, "b", id="b", deduplication_id="order-7")
        await eng.signal("a", "go")
        await eng.get_handle("a").result(timeout=5)
        again = await eng.enqueue(queue, quick, "c", id="c", deduplication_id="order-7")
        assert await again.result(timeout=5) == "c"


async def test_cancelling_an_enqueued_run_removes_it_from_the_queue(backend: Backend) -> None:
    queue = Queue("cancel", concurrency=1)
    async with engine(backend, queue) as eng:
        await eng.enqueue(queue, held, "first", id="first")
        await eventually(lambda: started == ["first"], what="first started")
        await eng.enqueue(queue, held, "gone", id="gone")
        await eng.enqueue(queue, held, "next", id="next")
        assert (await eng.queue_info("cancel")).depth == 2
        await eng.cancel("gone")
        assert (await eng.describe("gone")).status == "cancelled"
        assert (await eng.queue_info("cancel")).depth == 1
        await eng.signal("first", "go")
        await eventually(lambda: "next" in started, what="next started")
        assert "gone" not in started


async def test_worker_concurrency_caps_this_engine(backend: Backend) -> None:
    queue = Queue("local", worker_concurrency=2)
    async with engine(backend, queue) as eng:
        for i in range(4):
            await eng.enqueue(queue, held, f"w{i}", id=f"w{i}")
        await eventually(lambda: len(started) == 2, what="two started")
        await asyncio.sleep(0.05)
        assert len(started) == 2
        await eng.signal("w0", "go")
        await eventually(lambda: len(started) == 3, what="a third started")


async def test_rate_limit_counts_starts_per_window_on_the_engine_clock(backend: Backend) -> None:
    queue = Queue("api", rate_limit=(2, "10s"))
    async with engine(backend, queue) as eng:
        handles = [await eng.enqueue(queue, quick, f"q{i}", id=f"q{i}") for i in range(5)]
        await eventually(lambda: len(started) == 2, what="two started")
        await asyncio.sleep(0.05)
        assert len(started) == 2
        assert (await eng.queue_info("api")).recent_starts == 2
        backend.clock.advance(10)
        await eventually(lambda: len(started) == 4, what="two more after the window")
        await asyncio.sleep(0.05)
        assert len(started) == 4
        backend.clock.advance(10)
        assert [await h.result(timeout=5) for h in handles] == [f"q{i}" for i in range(5)]


async def test_a_delayed_run_waits_enqueued_until_its_time(backend: Backend) -> None:
    queue = Queue("later")
    async with engine(backend, queue) as eng:
        handle = await eng.enqueue(queue, quick, "late", id="late", delay="30s")
        await eng.enqueue(queue, quick, "now", id="now")
        await eventually(lambda: started == ["now"], what="the undelayed run started")
        assert (await eng.describe("late")).status == "enqueued"
        info = await eng.queue_info("later")
        assert (info.depth, info.delayed) == (1, 1)
        backend.clock.advance(30)
        assert await handle.result(timeout=5) == "late"


async def test_each_partition_key_gets_its_own_concurrency(backend: Backend) -> None:
    queue = Queue("tenants", concurrency=1, partitioned=True)
    async with engine(backend, queue) as eng:
        for tenant in ("a", "b"):
            for i in range(2):
                await eng.enqueue(
                    queue, held, f"{tenant}{i}", id=f"{tenant}{i}", partition_key=tenant
                )
        await eventually(lambda: sorted(started) == ["a0", "b0"], what="one per partition")
        await asyncio.sleep(0.05)
        assert sorted(started) == ["a0", "b0"]
        info = await eng.queue_info("tenants")
        assert (info.depth, info.in_flight, info.partitions) == (2, 2, 2)
        await eng.signal("a0", "go")
        await eventually(lambda: "a1" in started, what="a1 started")
        assert "b1" not in started


async def test_queue_info_reports_the_oldest_wait(backend: Backend) -> None:
    queue = Queue("aging", concurrency=1, rate_limit=(100, "1m"))
    async with engine(backend, queue) as eng:
        await eng.enqueue(queue, held, "x", id="x")
        await eventually(lambda: started == ["x"], what="x started")
        await eng.enqueue(queue, held, "y", id="y")
        backend.clock.advance(7)
        [info] = await eng.queues()
        assert info.name == "aging"
        assert info.oldest_wait_s == pytest.approx(7, abs=0.01)
        assert info.rate_limit == (100, 60.0)
        assert info.to_dict()["depth"] == 1


async def test_enqueued_runs_survive_a_restart(backend: Backend) -> None:
    if backend.name == "memory":
        pytest.skip("a restart needs a durable store")
    queue = Queue("durable", concurrency=1)
    async with engine(backend, queue) as eng:
        await eng.enqueue(queue, held, "one", id="one")
        await eng.enqueue(queue, quick, "two", id="two")
        await eventually(lambda: started == ["one"], what="one started")
    async with engine(backend, queue) as eng:
        await eventually(lambda: eng.is_running_here("one"), what="one recovered")
        assert started == ["one"]  # its recorded step is not run again
        assert (await eng.describe("two")).status == "enqueued"
        await eng.signal("one", "go")
        assert await eng.get_handle("two").result(timeout=5) == "two"


async def test_the_test_kit_skips_time_through_rate_limit_windows() -> None:
    from pyweft.testing import TestEnv

    queue = Queue("hourly", rate_limit=(1, "1h"))
    async with TestEnv(
        workflows=[quick], activities=[mark], queues=[queue], auto_advance=True
    ) as env:
        begin = env.now()
        handles = [await env.engine.enqueue(queue, quick, f"h{i}") for i in range(3)]
        assert [await env.result(h) for h in handles] == ["h0", "h1", "h2"]
        assert 2 <= (env.now() - begin).total_seconds() / 3600 < 3  # one start an hour


async def test_a_queue_registered_after_opening_is_dispatched(backend: Backend) -> None:
    async with engine(backend) as eng:
        later = eng.register_queue(Queue("later", concurrency=1))
        assert eng.register_queue(Queue("later", concurrency=1)) is later  # equal: no-op
        handle = await eng.enqueue("later", quick, "late")
        assert await handle.result(timeout=5) == "late"


async def test_concurrency_is_shared_by_two_engines_on_one_sqlite_file(tmp_path: Path) -> None:
    queue = Queue("shared", concurrency=2)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    options: dict[str, Any] = {
        "workflows": [held, quick],
        "activities": [mark],
        "queues": [queue],
        "ownership": "workflow-lease",
        "poll_interval": 0.05,
    }
    async with (
        Engine(url, engine_id="a", **options) as a,
        Engine(url, engine_id="b", **options) as b,
    ):
        for i in range(3):
            await a.enqueue(queue, held, f"a{i}", id=f"a{i}")
            await b.enqueue(queue, held, f"b{i}", id=f"b{i}")
        await eventually(lambda: len(started) == 2, what="two started")
        await asyncio.sleep(0.3)  # several polls of both engines
        assert len(started) == 2
        here = {name: a.is_running_here(name) or b.is_running_here(name) for name in started}
        assert all(here.values())
        for finished in range(6):
            name = started[finished]
            owner = a if a.is_running_here(name) else b
            await owner.signal(name, "go")
            await eventually(
                lambda n=finished: len(started) == min(6, n + 3), what="the next run started"
            )
        assert sorted(started) == ["a0", "a1", "a2", "b0", "b1", "b2"]
        assert (await a.queue_info("shared")).depth == 0


async def test_a_run_whose_delay_ended_keeps_its_place_in_line(backend: Backend) -> None:
    queue = Queue("line", concurrency=1)
    async with engine(backend, queue) as eng:
        await eng.enqueue(queue, held, "blocker", id="blocker")
        await eventually(lambda: started == ["blocker"], what="blocker started")
        await eng.enqueue(queue, held, "late", id="late", delay="30s")
        for name in ("a", "b"):
            await eng.enqueue(queue, held, name, id=name)
        backend.clock.advance(30)
        await asyncio.sleep(0.05)
        for count, name in enumerate(("blocker", "late", "a"), start=2):
            await eng.signal(name, "go")
            await eventually(lambda n=count: len(started) == n, what=f"after {name}")
        assert started == ["blocker", "late", "a", "b"]


async def test_a_signal_sent_while_enqueued_waits_for_the_run(backend: Backend) -> None:
    queue = Queue("early", concurrency=1)
    async with engine(backend, queue) as eng:
        await eng.enqueue(queue, held, "first", id="first")
        await eventually(lambda: started == ["first"], what="first started")
        second = await eng.enqueue(queue, held, "second", id="second")
        await eng.signal("second", "go")  # buffered while it waits in the queue
        await eng.signal("first", "go")
        assert await second.result(timeout=5) == "second"
