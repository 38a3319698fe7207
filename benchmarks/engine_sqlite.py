"""Engine throughput and latency on SQLite (issue 2 targets).

    .venv/bin/python benchmarks/engine_sqlite.py [--steps 10000] [--workflows 1000]

Prints: sequential steps/s (FULL and NORMAL), concurrent workflows/s, start->result
latency percentiles, and time to the first resumed step after a restart with
1,000 in-flight runs. Each scenario uses a fresh database in a temp directory.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import statistics
import tempfile
from pathlib import Path

from workloads import bench_concurrent, bench_latency, bench_restart, bench_sequential, pct


def url(tmp: Path, name: str, sync: str) -> str:
    return f"sqlite:///{tmp / name}.db?synchronous={sync}"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--workflows", type=int, default=1_000)
    parser.add_argument("--latency-samples", type=int, default=500)
    args = parser.parse_args()
    gc.collect()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for sync in ("FULL", "NORMAL"):
            print(f"synchronous={sync}")
            rate = await bench_sequential(url(tmp, f"seq-{sync}", sync), args.steps)
            print(
                f"  sequential: {args.steps} no-op activities in one workflow: {rate:,.0f} steps/s"
            )
            rate = await bench_concurrent(url(tmp, f"conc-{sync}", sync), args.workflows)
            print(
                f"  concurrent: {args.workflows} workflows x 3 activities: {rate:,.0f} workflows/s"
            )
            lat = await bench_latency(url(tmp, f"lat-{sync}", sync), args.latency_samples)
            print(
                f"  start->result of a 3-activity workflow: p50 {statistics.median(lat):.2f} ms, "
                f"p90 {pct(lat, 90):.2f} ms, p99 {pct(lat, 99):.2f} ms"
            )
            first = await bench_restart(url(tmp, f"restart-{sync}", sync), 1000)
            print(f"  restart with 1000 in-flight runs: first resumed step after {first:.1f} ms")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {rss:.0f} MiB")


if __name__ == "__main__":
    asyncio.run(main())
