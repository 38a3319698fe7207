"""Signal, update and query latency, and buffered-signal throughput, on SQLite (issue 3).

    .venv/bin/python benchmarks/messaging_sqlite.py [--samples 500] [--signals 10000]

Round trips are measured from the caller's call to the moment the workflow's
next step is committed (signals) or the answer is returned (updates, queries).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from pyweft import Engine, WorkflowContext, activity, workflow


@activity
async def ack(i: int) -> int:
    return i


@workflow
async def echo_signals(ctx: WorkflowContext, n: int) -> int:
    for _ in range(n):
        value = await ctx.wait_for_signal("ping")
        await ctx.run(ack, value)
    return n


@workflow
async def drain(ctx: WorkflowContext, n: int) -> int:
    await ctx.wait_for_signal("go")
    total = 0
    for _ in range(n):
        total += await ctx.wait_for_signal("item")
    return total


@workflow
async def counter(ctx: WorkflowContext) -> int:
    state = {"n": 0}

    def bump(by: int) -> int:
        state["n"] += by
        return state["n"]

    ctx.on_update("bump", bump)
    ctx.on_query("value", lambda: state["n"])
    await ctx.wait_for_signal("stop")
    return state["n"]


def summary(name: str, samples: list[float]) -> str:
    s = sorted(samples)
    p = lambda q: s[min(len(s) - 1, int(q * len(s)))]  # noqa: E731
    return (
        f"{name}: p50 {statistics.median(s):.3f} ms, p90 {p(0.9):.3f} ms, "
        f"p99 {p(0.99):.3f} ms (n={len(s)})"
    )


async def signal_round_trip(engine: Engine, samples: int) -> list[float]:
    handle = await engine.start(echo_signals, samples)
    out: list[float] = []
    events = engine.events(handle.id)
    for i in range(samples):
        t0 = time.perf_counter()
        await engine.signal(handle.id, "ping", i)
        async for event in events:  # wait for the ack step's commit
            if event.kind == "step_completed" and event.data.get("step_kind") == "activity":
                break
        out.append((time.perf_counter() - t0) * 1000)
    await handle.result()
    return out


async def buffered_throughput(engine: Engine, n: int) -> float:
    handle = await engine.start(drain, n)
    for i in range(n):
        await engine.signal(handle.id, "item", i)
    t0 = time.perf_counter()
    await engine.signal(handle.id, "go")
    await handle.result()
    return n / (time.perf_counter() - t0)


async def update_and_query(engine: Engine, samples: int) -> tuple[list[float], list[float]]:
    handle = await engine.start(counter)
    updates, queries = [], []
    for _ in range(samples):
        t0 = time.perf_counter()
        await handle.update("bump", 1)
        updates.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        await handle.query("value")
        queries.append((time.perf_counter() - t0) * 1000)
    await handle.signal("stop")
    await handle.result()
    return updates, queries


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--signals", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for sync in ("FULL", "NORMAL"):
            url = f"sqlite:///{Path(d) / sync}.db?synchronous={sync}"
            async with Engine(url, workflows=[echo_signals, drain, counter]) as engine:
                print(f"synchronous={sync}")
                rt = await signal_round_trip(engine, args.samples)
                print("  " + summary("signal round trip (send -> consumed -> next step)", rt))
                rate = await buffered_throughput(engine, args.signals)
                print(f"  one workflow consuming {args.signals} buffered signals: {rate:,.0f}/s")
                upd, qry = await update_and_query(engine, args.samples)
                print("  " + summary("update round trip", upd))
                print("  " + summary("query", qry))


if __name__ == "__main__":
    asyncio.run(main())
