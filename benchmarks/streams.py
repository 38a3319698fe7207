"""Stream fan-out across processes: one run writes chunks, readers in another process follow.

    .venv/bin/python benchmarks/streams.py [--store postgres|sqlite] [--chunks 10000]
        [--readers 10] [--url postgresql://...]

The writer is a child process (an engine driving one run that writes ``--chunks``
chunks, each carrying ``time.time()`` at the moment the workflow writes it). This
process is a client engine with ``--readers`` concurrent ``engine.read_stream``
readers. A reader's lag for a chunk is its arrival time minus the chunk's write
time (one machine, one wall clock); the write itself (a committed step) is inside
the lag. Reported: lag percentiles over every chunk of every reader, the writer's
rate, and the readers' throughput. On PostgreSQL readers hear of new chunks by
LISTEN/NOTIFY; on SQLite by the doorbell (pyweft.storage.doorbell).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

from pyweft import Engine, WorkflowContext, workflow

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@workflow
async def producer(ctx: WorkflowContext, chunks: int) -> float:
    await ctx.wait_for_signal("go")
    out = ctx.stream("tokens")
    began = time.time()
    for i in range(chunks):
        await out.write({"i": i, "t": time.time()})
    await out.close()
    return chunks / (time.time() - began)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


async def writer(url: str, chunks: int) -> None:
    async with Engine(url, workflows=[producer], ownership="none") as engine:
        handle = await engine.start(producer, chunks, id="bench", on_conflict="use_existing")
        print("READY", flush=True)
        rate = await handle.result(timeout=600)
        print(f"WRITER {rate:.0f}", flush=True)


def launch_writer(url: str, chunks: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--writer", "--url", url, "--chunks", str(chunks)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    return proc


async def main(url: str, chunks: int, readers: int, proc: subprocess.Popen[str]) -> None:
    lags: list[float] = []
    async with Engine(url, role="client") as engine:

        async def read() -> int:
            n = 0
            async for chunk in engine.read_stream("bench", "tokens"):
                lags.append(time.time() - chunk["t"])
                n += 1
            return n

        tasks = [asyncio.ensure_future(read()) for _ in range(readers)]
        await asyncio.sleep(0.5)  # every reader is following before the first write
        began = time.perf_counter()
        await engine.signal("bench", "go")
        counts = await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - began
    out, _ = await asyncio.to_thread(proc.communicate, timeout=60)
    assert counts == [chunks] * readers, counts
    ms = [x * 1000 for x in lags]
    print(f"store: {url.split('?')[0].split('://')[0]}; {chunks} chunks, {readers} readers")
    print(f"writer: {out.strip()} chunks/s")
    print(f"readers: {chunks * readers / elapsed:,.0f} chunks/s delivered in total")
    print(
        f"lag ms: p50 {pct(ms, 50):.2f}  p90 {pct(ms, 90):.2f}  p99 {pct(ms, 99):.2f}  "
        f"max {max(ms):.2f}"
    )


def _pg_schema(base: str) -> tuple[str, str]:
    schema = f"pyweft_bench_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}schema={schema}", schema


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--url", default=None)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--readers", type=int, default=10)
    parser.add_argument("--writer", action="store_true")
    ns = parser.parse_args()
    if ns.writer:
        asyncio.run(writer(ns.url, ns.chunks))
        sys.exit(0)
    schema = None
    if ns.store == "postgres":
        url, schema = _pg_schema(ns.url or DEFAULT_URL)
    else:
        url = ns.url or f"sqlite:///{Path('/tmp') / f'pyweft-streams-{uuid.uuid4().hex}.db'}"
    try:
        asyncio.run(main(url, ns.chunks, ns.readers, launch_writer(url, ns.chunks)))
    finally:
        if schema is not None:
            with psycopg.connect(ns.url or DEFAULT_URL, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )
