"""Schedules on SQLite, on the real clock.

    .venv/bin/python benchmarks/schedules_sqlite.py delay [SECONDS]   # default 300
    .venv/bin/python benchmarks/schedules_sqlite.py idle [SCHEDULES] [SECONDS]  # 10000, 60

``delay``: one schedule firing every second (6-field cron, no jitter); for every
occurrence, how long after its nominal time the workflow's first line ran
(fire delay = timer + due scan + the create batch's commit + the run's start).
Prints p50/p90/p99/max in ms. Target: p99 <= 50 ms over 5 minutes.

``idle``: SCHEDULES active schedules (each fires once a day, at times spread
over the day, none inside the measured window), then the engine left idle for
SECONDS: CPU time the process used, as a share of one core. Target: <= 1%.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time

from pyweft import Engine, WorkflowContext, workflow

delays: list[float] = []


@workflow(name="beat")
async def beat(ctx: WorkflowContext) -> None:
    nominal = ctx.info.nominal_time
    if nominal is not None and not ctx.is_replaying:
        delays.append(time.time() - nominal.timestamp())


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def delay(seconds: float) -> None:
    path = os.path.join(tempfile.mkdtemp(), "bench.db")
    async with Engine(f"sqlite:///{path}", workflows=[beat]) as engine:
        await engine.create_schedule("tick", beat, cron="* * * * * *")
        await asyncio.sleep(seconds + 0.5)
    ms = [d * 1000 for d in delays]
    print(f"one schedule every second for {seconds:g}s: {len(ms)} occurrences fired")
    print(
        f"fire delay past nominal: p50 {pct(ms, 50):.1f} ms, p90 {pct(ms, 90):.1f} ms, "
        f"p99 {pct(ms, 99):.1f} ms, max {max(ms):.1f} ms, mean {statistics.fmean(ms):.1f} ms"
    )


async def idle(count: int, seconds: float) -> None:
    path = os.path.join(tempfile.mkdtemp(), "bench.db")
    async with Engine(f"sqlite:///{path}", workflows=[beat]) as engine:
        now = time.gmtime(time.time() + 3600)  # nothing fires in the next hour
        t0 = time.perf_counter()
        sem = asyncio.Semaphore(64)

        async def make(i: int) -> None:
            minute = i % 60
            hour = (now.tm_hour + 1 + (i // 60) % 22) % 24
            async with sem:
                await engine.create_schedule(f"s{i:05d}", beat, cron=f"{minute} {hour} * * *")

        await asyncio.gather(*(make(i) for i in range(count)))
        print(f"created {count} schedules in {time.perf_counter() - t0:.1f}s")
        await asyncio.sleep(2)  # let the creation work settle
        before = resource.getrusage(resource.RUSAGE_SELF)
        wall0 = time.perf_counter()
        await asyncio.sleep(seconds)
        after = resource.getrusage(resource.RUSAGE_SELF)
        wall = time.perf_counter() - wall0
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(
        f"{count} active schedules, idle for {wall:.1f}s: CPU {cpu * 1000:.0f} ms = "
        f"{cpu / wall * 100:.2f}% of one core; fired during the window: {len(delays)}"
    )


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "delay"
    if mode == "delay":
        asyncio.run(delay(float(sys.argv[2]) if len(sys.argv) > 2 else 300.0))
    elif mode == "idle":
        count = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
        asyncio.run(idle(count, float(sys.argv[3]) if len(sys.argv) > 3 else 60.0))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
