"""Workflow queue drain rate on SQLite (issue 14).

    .venv/bin/python benchmarks/workflow_queues.py [--runs 10000] [--concurrency 50]

Enqueues ``--runs`` one-step workflows (one no-op activity each) on a queue with
``concurrency=--concurrency`` through a client engine (which stores them and starts
nothing), then opens an engine that serves the queue and times how long it takes to
drain it: from opening until every run has finished and no slot is held. Prints the
enqueue rate, the drain rate (workflows/s) and the CPU time per workflow.

``--compare`` also runs the same workflows without a queue (``engine.start`` with at
most ``--concurrency`` in flight, held by a semaphore in the caller): the engine's own
ceiling at that concurrency, to read the queue's figure against.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from pyweft import Engine, Queue, WorkflowContext, activity, workflow
from pyweft.engine.queues import layout


@activity
async def noop(i: int) -> int:
    return i


@workflow
async def one_step(ctx: WorkflowContext, i: int) -> int:
    return await ctx.run(noop, i)


async def bench(path: Path, runs: int, concurrency: int) -> None:
    queue = Queue("bench", concurrency=concurrency)
    url = f"sqlite:///{path}"
    async with Engine(
        url, workflows=[one_step], activities=[noop], queues=[queue], role="client"
    ) as client:
        t0 = time.perf_counter()
        for start in range(0, runs, 500):
            await asyncio.gather(
                *(client.enqueue(queue, one_step, i) for i in range(start, min(runs, start + 500)))
            )
        enqueue_s = time.perf_counter() - t0
    print(f"enqueue: {runs} runs in {enqueue_s:.2f}s = {runs / enqueue_s:,.0f} runs/s")
    cpu0, t0 = time.process_time(), time.perf_counter()
    async with Engine(url, workflows=[one_step], activities=[noop], queues=[queue]) as engine:
        storage = engine.storage
        while True:
            waiting = await storage.scan(layout.waiting_prefix("bench", ""), limit=1)
            slots = await storage.scan(layout.slot_prefix("bench", ""), limit=1)
            if not waiting and not slots:
                break
            await asyncio.sleep(0.01)
        drain_s = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        info = await engine.queue_info("bench")
        completed = await engine.aggregate(group_by="status")
    print(
        f"drain: {runs} runs, concurrency={concurrency}, in {drain_s:.2f}s = "
        f"{runs / drain_s:,.0f} workflows/s; CPU {cpu / runs * 1e6:,.0f} µs/workflow"
    )
    print(
        f"after: depth={info.depth} in_flight={info.in_flight}; "
        + ", ".join(f"{g.key}={g.count}" for g in completed)
    )


async def bench_plain(path: Path, runs: int, concurrency: int) -> None:
    async with Engine(f"sqlite:///{path}", workflows=[one_step], activities=[noop]) as engine:
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with gate:
                await (await engine.start(one_step, i)).result()

        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(runs)))
        took = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    print(
        f"no queue: {runs} runs started {concurrency} at a time in {took:.2f}s = "
        f"{runs / took:,.0f} workflows/s; CPU {cpu / runs * 1e6:,.0f} µs/workflow"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--compare", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bench(Path(tmp) / "queues.db", args.runs, args.concurrency))
        if args.compare:
            asyncio.run(bench_plain(Path(tmp) / "plain.db", args.runs, args.concurrency))


if __name__ == "__main__":
    main()
