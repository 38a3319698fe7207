"""The test kit's time skipping: 1,000 runs each sleeping 30 days, advanced at once.

    .venv/bin/python benchmarks/testkit_virtual_time.py [RUNS]

Prints the wall time to start the runs, to advance 30 days (every timer fired,
every run finished), and a month-long single workflow (30 daily sleeps) with
``auto_advance``. Target: the 1,000 x 30-day advance in <= 1 s of wall time.
"""

from __future__ import annotations

import asyncio
import sys
import time

from pyweft import WorkflowContext, workflow
from pyweft.testing import TestEnv


@workflow
async def napper(ctx: WorkflowContext) -> str:
    await ctx.sleep("30 days")
    return "rested"


@workflow
async def monthly(ctx: WorkflowContext) -> int:
    for _ in range(30):
        await ctx.sleep("1 day")
    return 30


async def main(runs: int) -> None:
    async with TestEnv(workflows=[napper, monthly], auto_advance=True) as env:
        t0 = time.perf_counter()
        handles = [await env.engine.start(napper) for _ in range(runs)]
        await env.settle()
        t1 = time.perf_counter()
        await env.advance("30 days")
        results = [await env.result(h) for h in handles]
        t2 = time.perf_counter()
        assert results == ["rested"] * runs
        month = await env.start(monthly)
        assert await env.result(month) == 30
        t3 = time.perf_counter()
    print(f"start {runs} runs that sleep 30 days: {t1 - t0:.3f}s wall")
    print(f"advance 30 days, every run finished: {t2 - t1:.3f}s wall")
    print(f"one workflow of 30 daily sleeps with auto_advance: {(t3 - t2) * 1000:.1f} ms wall")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
