"""Listing, aggregates and fan-out on SQLite (issue 4 targets).

    .venv/bin/python benchmarks/visibility_sqlite.py [--runs 100000] [--fanout 1000]

Fills a fresh store with --runs runs of four workflow types (10% left running,
the rest completed, each with a region and an amount attribute), then times a
page of 50 filtered by status+type and by attribute, paging with cursors, an
aggregate by status, and one workflow fanning out over --fanout activities.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from pyweft import Engine, WorkflowContext, activity, workflow

REGIONS = ("eu", "us", "apac", "latam")


def make_type(name: str) -> object:
    @workflow(name=name)
    async def body(ctx: WorkflowContext, region: str, amount: int, park: bool) -> None:
        ctx.set_attributes({"region": region, "amount": amount})
        if park:
            await ctx.wait_for_signal("never")

    return body


TYPES = [make_type(f"type{i}") for i in range(4)]


@activity
async def noop(i: int) -> int:
    return i


@workflow
async def fan_out(ctx: WorkflowContext, n: int) -> int:
    results = await ctx.all(*(ctx.run(noop, i) for i in range(n)))
    return len(results)


def timed_ms(samples: list[float]) -> str:
    s = sorted(samples)
    return f"p50 {statistics.median(s):.2f} ms, p90 {s[int(0.9 * (len(s) - 1))]:.2f} ms"


async def populate(engine: Engine, runs: int) -> float:
    t0 = time.perf_counter()
    chunk = 500
    for base in range(0, runs, chunk):
        handles = await asyncio.gather(
            *(
                engine.start(
                    f"type{n % 4}", REGIONS[n % 7 % 4], n % 1000, n % 10 == 0, id=f"r{n:07d}"
                )
                for n in range(base, min(runs, base + chunk))
            )
        )
        await asyncio.gather(*(h.result() for h in handles if int(h.id[1:]) % 10 != 0))
    return runs / (time.perf_counter() - t0)


async def measure(engine: Engine, label: str, call: object, repeat: int = 30) -> None:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await call()  # type: ignore[operator]
        samples.append((time.perf_counter() - t0) * 1000)
    print(f"  {label}: {timed_ms(samples)}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--fanout", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{Path(d) / 'vis.db'}"
        async with Engine(url, workflows=[*TYPES, fan_out]) as engine:
            rate = await populate(engine, args.runs)
            print(f"populated {args.runs} runs at {rate:,.0f} runs/s")
            page = await engine.list(status="completed", workflow_type="type1", limit=50)
            assert len(page.items) == 50
            await measure(
                engine,
                "page of 50 by status+type",
                lambda: engine.list(status="completed", workflow_type="type1", limit=50),
            )
            await measure(
                engine,
                "next page of 50 by status+type (cursor)",
                lambda: engine.list(
                    status="completed", workflow_type="type1", limit=50, cursor=page.next_cursor
                ),
            )
            await measure(
                engine,
                "page of 50 by attribute (region=eu)",
                lambda: engine.list(attributes={"region": "eu"}, limit=50),
            )
            await measure(
                engine,
                "page of 50 by status+attribute (running, region=us)",
                lambda: engine.list(status="running", attributes={"region": "us"}, limit=50),
            )
            await measure(
                engine, "aggregate by status", lambda: engine.aggregate(group_by="status"), 10
            )
            groups = await engine.aggregate(group_by="status")
            print(f"  (groups: {[(g.key, g.count) for g in groups]})")
            await measure(engine, "aggregate by type", lambda: engine.aggregate(group_by="type"), 5)
            for sync in ("FULL",):
                t0 = time.perf_counter()
                n = await (await engine.start(fan_out, args.fanout)).result()
                elapsed = time.perf_counter() - t0
                print(
                    f"ctx.all over {n} no-op activities ({sync}): "
                    f"{n / elapsed:,.0f} activities/s ({elapsed * 1000:.0f} ms)"
                )


if __name__ == "__main__":
    asyncio.run(main())
