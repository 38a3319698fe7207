"""Engine throughput and latency on SQLite (issue 2 targets).

    .venv/bin/python benchmarks/engine_sqlite.py [--steps 10000] [--workflows 1000]

Prints: sequential steps/s (FULL and NORMAL), concurrent workflows/s, start->result
latency percentiles, and time to the first resumed step after a restart with
1,000 in-flight runs. Each scenario uses a fresh database in a temp directory.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import statistics
import tempfile
import time
from pathlib import Path

from pyweft import Engine, WorkflowContext, activity, workflow


@activity
async def noop(i: int) -> int:
    return i


@workflow
async def sequential(ctx: WorkflowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.run(noop, i)
    return total


@workflow
async def three(ctx: WorkflowContext) -> int:
    a = await ctx.run(noop, 1)
    b = await ctx.run(noop, 2)
    c = await ctx.run(noop, 3)
    return a + b + c


first_resumed: list[float] = []
gate: asyncio.Event | None = None


@activity
async def park() -> None:
    # Parks the run (first life) or records when the resumed run got here.
    if gate is not None:
        await gate.wait()
    else:
        first_resumed.append(time.perf_counter())


@workflow
async def parked(ctx: WorkflowContext) -> None:
    await ctx.run(noop, 0)
    await ctx.run(park)


def url(tmp: Path, name: str, sync: str) -> str:
    return f"sqlite:///{tmp / name}.db?synchronous={sync}"


async def bench_sequential(tmp: Path, steps: int, sync: str) -> float:
    async with Engine(url(tmp, f"seq-{sync}", sync), workflows=[sequential]) as engine:
        t0 = time.perf_counter()
        await (await engine.start(sequential, steps)).result()
        return steps / (time.perf_counter() - t0)


async def bench_concurrent(tmp: Path, n: int, sync: str) -> float:
    async with Engine(url(tmp, f"conc-{sync}", sync), workflows=[three]) as engine:
        t0 = time.perf_counter()
        handles = await asyncio.gather(*(engine.start(three) for _ in range(n)))
        await asyncio.gather(*(h.result() for h in handles))
        return n / (time.perf_counter() - t0)


async def bench_latency(tmp: Path, n: int, sync: str) -> list[float]:
    async with Engine(url(tmp, f"lat-{sync}", sync), workflows=[three]) as engine:
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            await (await engine.start(three)).result()
            samples.append((time.perf_counter() - t0) * 1000)
        return samples


async def bench_restart(tmp: Path, n: int, sync: str) -> float:
    global gate
    db = url(tmp, f"restart-{sync}", sync)
    gate = asyncio.Event()
    async with Engine(db, workflows=[parked]) as engine:
        await asyncio.gather(*(engine.start(parked, id=f"p{i}") for i in range(n)))
        while len(await engine.history(f"p{n - 1}")) < 1:
            await asyncio.sleep(0.01)
    gate = None
    first_resumed.clear()
    t0 = time.perf_counter()
    async with Engine(db, workflows=[parked]) as engine:
        while len(first_resumed) < n:
            await asyncio.sleep(0.005)
        first = (min(first_resumed) - t0) * 1000
        everyone = (max(first_resumed) - t0) * 1000
        print(f"  restart: all {n} runs resumed their next step within {everyone:.0f} ms")
        del engine
    return first


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--workflows", type=int, default=1_000)
    parser.add_argument("--latency-samples", type=int, default=500)
    args = parser.parse_args()
    gc.collect()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for sync in ("FULL", "NORMAL"):
            print(f"synchronous={sync}")
            rate = await bench_sequential(tmp, args.steps, sync)
            print(
                f"  sequential: {args.steps} no-op activities in one workflow: {rate:,.0f} steps/s"
            )
            rate = await bench_concurrent(tmp, args.workflows, sync)
            print(
                f"  concurrent: {args.workflows} workflows x 3 activities: {rate:,.0f} workflows/s"
            )
            lat = await bench_latency(tmp, args.latency_samples, sync)
            print(
                f"  start->result of a 3-activity workflow: p50 {statistics.median(lat):.2f} ms, "
                f"p90 {pct(lat, 90):.2f} ms, p99 {pct(lat, 99):.2f} ms"
            )
            first = await bench_restart(tmp, 1000, sync)
            print(f"  restart with 1000 in-flight runs: first resumed step after {first:.1f} ms")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {rss:.0f} MiB")


if __name__ == "__main__":
    asyncio.run(main())
