"""Async completion round trip (issue 13): token completed -> the workflow's next step committed.

    .venv/bin/python benchmarks/async_completion.py [--samples 200] [--pg URL]

Same process on SQLite: one engine drives a workflow that parks on a token and
then records one more step, ``--samples`` times in a row; the clock starts just
before ``complete_activity`` and stops at the ``step_completed`` event of the
next step (emitted after its commit).

Another process on PostgreSQL (with ``--pg``, default the local test server):
the owner engine runs here; a child process completes each token through its own
client engine, printing ``time.time()`` just before each call; the clock stops at
the next step's ``step_completed`` event here.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from pyweft import Engine, WorkflowContext, activity, activity_context, workflow

CHILD = """
import asyncio, sys, time
from pyweft import Engine

async def main(url: str) -> None:
    async with Engine(url, role="client") as client:
        loop = asyncio.get_running_loop()
        while True:
            token = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
            if not token:
                return
            print(f"{time.time():.6f}", flush=True)
            await client.complete_activity(token, "ok")

asyncio.run(main(sys.argv[1]))
"""


@activity
async def park() -> Any:
    return activity_context().complete_async()


@activity
async def mark(i: int) -> int:
    return i


@workflow(name="round_trips")
async def round_trips(ctx: WorkflowContext, n: int) -> int:
    for i in range(n):
        await ctx.run(park)
        await ctx.run(mark, i)
    return n


async def _next(events: Any, kind: str, name: str | None = None) -> Any:
    async for event in events:
        if event.kind == kind and (name is None or event.data.get("name") == name):
            return event
    raise AssertionError("events ended")


async def same_process(url: str, samples: int) -> tuple[list[float], list[float]]:
    out: list[float] = []
    own: list[float] = []
    async with Engine(url, workflows=[round_trips]) as engine:
        events = engine.events("rt")
        handle = await engine.start(round_trips, samples, id="rt")
        for _ in range(samples):
            parked = await _next(events, "activity_async_pending")
            t0 = time.perf_counter()
            await engine.complete_activity(parked.data["token"], "ok")
            await _next(events, "step_completed", "park")
            own.append((time.perf_counter() - t0) * 1000)
            await _next(events, "step_completed", "mark")
            out.append((time.perf_counter() - t0) * 1000)
        await handle.result()
    return own, out


async def other_process(url: str, samples: int) -> tuple[list[float], list[float]]:
    out: list[float] = []
    own: list[float] = []
    async with Engine(url, workflows=[round_trips]) as engine:
        child = subprocess.Popen(  # noqa: ASYNC220 - started once, before the clock runs
            [sys.executable, "-c", CHILD, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdin is not None and child.stdout is not None
        loop = asyncio.get_running_loop()
        events = engine.events("rt-pg")
        handle = await engine.start(round_trips, samples, id="rt-pg")
        try:
            for _ in range(samples):
                parked = await _next(events, "activity_async_pending")
                child.stdin.write(parked.data["token"] + "\n")
                child.stdin.flush()
                sent = float(await loop.run_in_executor(None, child.stdout.readline))
                await _next(events, "step_completed", "park")
                own.append((time.time() - sent) * 1000)
                await _next(events, "step_completed", "mark")
                out.append((time.time() - sent) * 1000)
            await handle.result()
        finally:
            child.stdin.close()
            child.wait(timeout=30)
    return own, out


def show(what: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    print(
        f"{what}: p50 {statistics.median(samples):.2f} ms, p90 {p90:.2f} ms, "
        f"min {ordered[0]:.2f} ms ({len(samples)} samples)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--skip-pg", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for sync in ("FULL", "NORMAL"):
            url = f"sqlite:///{Path(d) / sync}.db?synchronous={sync}"
            own, nxt = await same_process(url, args.samples)
            show(f"SQLite {sync}, same process, the completed step committed", own)
            show(f"SQLite {sync}, same process, the step after it committed", nxt)
    if not args.skip_pg:
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:12]}"
        sep = "&" if "?" in args.pg else "?"
        try:
            own, nxt = await other_process(f"{args.pg}{sep}schema={schema}", args.samples)
            show("PostgreSQL, from another process, the completed step committed", own)
            show("PostgreSQL, from another process, the step after it committed", nxt)
        finally:
            with psycopg.connect(args.pg, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    asyncio.run(main())
