"""Messages sent through an engine that does not drive the run, on PostgreSQL.

    .venv/bin/python benchmarks/remote_messaging_postgres.py [--url ...] [--samples 200]

Two engines share one schema: the owner drives a run, the sender (an engine
opened with ``recover=False``, standing in for a web process or another worker)
sends it signals and asks it queries. Measured from the sender's call to the
run's next step being committed (signal) or the answer returned (query), with
the owner's wake-up notifications on (LISTEN/NOTIFY) and, for comparison,
with a store that cannot notify, so that the owner only polls (poll_interval
1 s, the default).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from typing import Any

import psycopg
from psycopg import sql

from pyweft import Engine, WorkflowContext, activity, workflow
from pyweft.storage import PostgresStorage

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@activity
async def ack(i: int) -> int:
    return i


@workflow
async def echo(ctx: WorkflowContext, n: int) -> int:
    seen = {"last": -1}
    ctx.on_query("last", lambda: seen["last"])
    for _ in range(n):
        seen["last"] = await ctx.run(ack, await ctx.wait_for_signal("ping"))
    await ctx.wait_for_signal("stop")  # stays live for the last query
    return n


class PollingOnly(PostgresStorage):
    """The same store with its notifications hidden: the engine falls back to polling."""

    def __getattribute__(self, name: str) -> Any:
        if name in ("notify", "listen"):
            raise AttributeError(name)
        return super().__getattribute__(name)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


async def measure(base: str, schema: str, samples: int, notify: bool) -> None:
    kind = PostgresStorage if notify else PollingOnly
    owner_store, sender_store = kind(base, schema=schema), kind(base, schema=schema)
    async with (
        Engine(owner_store, workflows=[echo]) as owner,
        Engine(sender_store, workflows=[echo], recover=False) as sender,
    ):
        wid = f"echo-{uuid.uuid4().hex[:8]}"
        events = owner.run_events(wid)  # the owner's own record of each committed step
        await owner.start(echo, samples, id=wid)
        await asyncio.sleep(0.2)
        signal_ms, query_ms = [], []
        for i in range(samples):
            t0 = time.perf_counter()
            await sender.signal(wid, "ping", i)
            async for event in events:
                if event.kind == "step_completed" and event.data.get("name") == "ack":
                    break
            signal_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            assert await sender.query(wid, "last", timeout=10) == i
            query_ms.append((time.perf_counter() - t0) * 1000)
        await sender.signal(wid, "stop")
        mode = "notifications" if notify else "polling only "
        for name, values in (("signal -> step committed", signal_ms), ("query", query_ms)):
            print(
                f"{mode}  {name:26s} p50 {pct(values, 50):7.1f} ms  p90 "
                f"{pct(values, 90):7.1f} ms  p99 {pct(values, 99):7.1f} ms"
            )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("PYWEFT_TEST_POSTGRES_URL", DEFAULT_URL))
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    schema = f"pyweft_bench_msg_{uuid.uuid4().hex[:8]}"
    try:
        await measure(args.url, schema, args.samples, notify=True)
        await measure(args.url, schema, max(10, args.samples // 20), notify=False)
    finally:
        with psycopg.connect(args.url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    asyncio.run(main())
