"""Workloads and measurements shared by the engine benchmarks (SQLite, PostgreSQL).

Each measurement takes the store URL to run on, so the per-store scripts only
say where the store is.
"""

from __future__ import annotations

import asyncio
import time

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


async def bench_sequential(url: str, steps: int) -> float:
    """Steps/s of one workflow running ``steps`` no-op activities in a row."""
    async with Engine(url, workflows=[sequential]) as engine:
        t0 = time.perf_counter()
        await (await engine.start(sequential, steps)).result()
        return steps / (time.perf_counter() - t0)


async def bench_concurrent(url: str, n: int) -> float:
    """Workflows/s of ``n`` 3-activity workflows started together and awaited."""
    async with Engine(url, workflows=[three]) as engine:
        t0 = time.perf_counter()
        handles = await asyncio.gather(*(engine.start(three) for _ in range(n)))
        await asyncio.gather(*(h.result() for h in handles))
        return n / (time.perf_counter() - t0)


async def bench_latency(url: str, n: int) -> list[float]:
    """Milliseconds from start to result of a 3-activity workflow, ``n`` times in a row."""
    async with Engine(url, workflows=[three]) as engine:
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            await (await engine.start(three)).result()
            samples.append((time.perf_counter() - t0) * 1000)
        return samples


async def bench_restart(url: str, n: int) -> float:
    """Milliseconds from entering an engine to the first resumed step of ``n`` parked runs."""
    global gate
    gate = asyncio.Event()
    async with Engine(url, workflows=[parked]) as engine:
        await asyncio.gather(*(engine.start(parked, id=f"p{i}") for i in range(n)))
        while len(await engine.history(f"p{n - 1}")) < 1:
            await asyncio.sleep(0.01)
    gate = None
    first_resumed.clear()
    t0 = time.perf_counter()
    async with Engine(url, workflows=[parked]) as engine:
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
