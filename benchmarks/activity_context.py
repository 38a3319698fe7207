"""Activity-side costs (issue 13): heartbeats, and no-op activity throughput with the context.

    .venv/bin/python benchmarks/activity_context.py [--calls 100000] [--steps 5000]
        [--runs 3] [--memory] [--count-calls] [--skip-heartbeats]

Prints:
- heartbeat(details) in a tight loop of ``--calls`` calls, in an ``async def``
  activity (event-loop thread) and in a ``def`` activity (pool thread): average cost
  per call, and how many records were written against the throttle's bound;
- sequential no-op activities per second in one workflow on SQLite (FULL), the same
  workload as ``engine_sqlite.py``. Compare with a checkout of the previous commit
  (``PYTHONPATH=<old>/src``) to see what the activity context costs.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import math
import pstats
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workloads import bench_sequential

from pyweft import Engine, SQLiteStorage, WorkflowContext, activity, workflow
from pyweft.storage.base import Expect, Op, Put

THROTTLE_S = 0.05


class CountingSQLite(SQLiteStorage):
    """Counts batches that write an open-step record (where heartbeat details live)."""

    detail_writes = 0

    async def conditional_batch(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> bool:
        if any(isinstance(op, Put) and ":p:" in op.key for op in ops):
            self.detail_writes += 1
        return await super().conditional_batch(conditions, ops)


async def bench_heartbeats(tmp: Path, which: str, calls: int) -> tuple[float, int, int]:
    """(µs per call, records written, bound on records for the elapsed time)."""
    from pyweft import activity_context

    @activity(heartbeat_throttle=THROTTLE_S)
    async def beat_async() -> float:
        ctx = activity_context()
        t0 = time.perf_counter()
        for i in range(calls):
            ctx.heartbeat(i)
            if i % 1000 == 0:
                await asyncio.sleep(0)  # let the loop write (a real activity awaits I/O)
        return time.perf_counter() - t0

    @activity(heartbeat_throttle=THROTTLE_S)
    def beat_sync() -> float:
        ctx = activity_context()
        t0 = time.perf_counter()
        for i in range(calls):
            ctx.heartbeat(i)
        return time.perf_counter() - t0

    @workflow(name=f"beating_{which}")
    async def beating(ctx: WorkflowContext) -> float:
        return float(await ctx.run(beat_async if which == "async" else beat_sync))

    storage = CountingSQLite(tmp / f"beats-{which}.db")
    async with Engine(storage, workflows=[beating]) as engine:
        handle = await engine.start(beating)
        t0 = time.perf_counter()
        inside = await handle.result()
        elapsed = time.perf_counter() - t0
    bound = math.ceil(elapsed / THROTTLE_S) + 1
    return inside / calls * 1e6, storage.detail_writes, bound


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-heartbeats", action="store_true")
    parser.add_argument("--memory", action="store_true", help="throughput on memory://")
    parser.add_argument(
        "--count-calls",
        action="store_true",
        help="also count Python function calls per no-op step (independent of machine load)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if not args.skip_heartbeats:
            for which in ("async", "sync"):
                us, writes, bound = await bench_heartbeats(tmp, which, args.calls)
                print(
                    f"heartbeat ({which} activity, {args.calls:,} calls): {us:.3f} us/call; "
                    f"{writes} records written, bound {bound} (one per {THROTTLE_S}s + 1)"
                )
        rates: list[Any] = []
        cpu: list[float] = []
        for i in range(args.runs):
            url = f"sqlite:///{tmp / f'seq-{i}'}.db?synchronous=FULL"
            if args.memory:
                url = "memory://"
            c0 = time.process_time()
            rates.append(await bench_sequential(url, args.steps))
            cpu.append((time.process_time() - c0) / args.steps * 1e6)
        shown = ", ".join(f"{r:,.0f}" for r in rates)
        if args.count_calls:
            profile = cProfile.Profile()
            profile.enable()
            await bench_sequential("memory://", args.steps)
            profile.disable()
            calls = pstats.Stats(profile).total_calls / args.steps  # type: ignore[attr-defined]
            print(f"function calls per no-op step (memory store): {calls:.1f}")
        print(
            f"sequential no-op activities (FULL, {args.steps} steps, {args.runs} runs): "
            f"{shown} steps/s; median {statistics.median(rates):,.0f}; CPU per step "
            f"(median, engine process) {statistics.median(cpu):.1f} us"
            + (" [memory store]" if args.memory else "")
        )


if __name__ == "__main__":
    asyncio.run(main())
