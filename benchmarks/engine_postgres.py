"""Engine throughput and latency on PostgreSQL, plus the adapter's own CAS rate.

    .venv/bin/python benchmarks/engine_postgres.py [--url postgresql://...] [--steps 10000]
        [--workflows 1000] [--latency-samples 500] [--cas 5000]

Prints: storage-level sequential CAS/s and get+CAS/s, sequential engine steps/s
(one workflow of no-op activities), concurrent workflows/s (3 activities each),
start->result latency percentiles, and time to the first resumed step after a
restart with 1,000 in-flight runs. Each scenario runs in a fresh schema that
is dropped afterwards. The server is ``--url``, else ``$PYWEFT_TEST_POSTGRES_URL``,
else ``postgresql://postgres@127.0.0.1:5432/postgres``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import statistics
import time
import uuid
from urllib.parse import urlencode

import psycopg
from psycopg import sql
from workloads import bench_concurrent, bench_latency, bench_restart, bench_sequential, pct

from pyweft.storage import Expect, PostgresStorage, Put

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
VALUE = b"x" * 200
schemas: list[str] = []


def fresh_schema(base: str, name: str) -> tuple[str, str]:
    """A new schema name and the URL that points the engine at it."""
    schema = f"pyweft_bench_{name}_{uuid.uuid4().hex[:8]}"
    schemas.append(schema)
    sep = "&" if "?" in base else "?"
    return schema, f"{base}{sep}{urlencode({'schema': schema})}"


async def bench_storage(base: str, n: int) -> tuple[float, float]:
    schema, _ = fresh_schema(base, "cas")
    storage = PostgresStorage(base, schema=schema)
    try:
        await storage.get("warm-up")
        started = time.perf_counter()
        for i in range(n):
            key = f"seq:{i:08d}"
            if not await storage.conditional_batch(
                [Expect(key=key, value=None)], [Put(key=key, value=VALUE)]
            ):
                raise AssertionError(key)
        cas = n / (time.perf_counter() - started)
        started = time.perf_counter()
        for i in range(n):
            key = f"step:{i:08d}"
            current = await storage.get(key)
            if not await storage.conditional_batch(
                [Expect(key=key, value=current)], [Put(key=key, value=VALUE)]
            ):
                raise AssertionError(key)
        return cas, n / (time.perf_counter() - started)
    finally:
        await storage.close()


def drop_schemas(base: str) -> None:
    with psycopg.connect(base, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=os.environ.get("PYWEFT_TEST_POSTGRES_URL", DEFAULT_URL))
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--workflows", type=int, default=1_000)
    parser.add_argument("--latency-samples", type=int, default=500)
    parser.add_argument("--cas", type=int, default=5_000)
    args = parser.parse_args()
    base: str = args.url
    gc.collect()
    try:
        cas, get_cas = await bench_storage(base, args.cas)
        print(f"storage: sequential CAS {cas:,.0f}/s, sequential get+CAS {get_cas:,.0f}/s")
        rate = await bench_sequential(fresh_schema(base, "seq")[1], args.steps)
        print(f"sequential: {args.steps} no-op activities in one workflow: {rate:,.0f} steps/s")
        rate = await bench_concurrent(fresh_schema(base, "conc")[1], args.workflows)
        print(f"concurrent: {args.workflows} workflows x 3 activities: {rate:,.0f} workflows/s")
        lat = await bench_latency(fresh_schema(base, "lat")[1], args.latency_samples)
        print(
            f"start->result of a 3-activity workflow: p50 {statistics.median(lat):.2f} ms, "
            f"p90 {pct(lat, 90):.2f} ms, p99 {pct(lat, 99):.2f} ms"
        )
        first = await bench_restart(fresh_schema(base, "restart")[1], 1000)
        print(f"restart with 1000 in-flight runs: first resumed step after {first:.1f} ms")
    finally:
        drop_schemas(base)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {rss:.0f} MiB")


if __name__ == "__main__":
    asyncio.run(main())
