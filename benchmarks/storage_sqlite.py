"""SQLite adapter throughput: sequential CAS batches, get+CAS steps, and concurrent batches.

    python benchmarks/storage_sqlite.py [--n 5000] [--concurrency 100]

"Sequential" is one coroutine committing one conditional batch at a time,
the shape of a single workflow run recording its steps; "concurrent" is
many coroutines committing at once, which group commit coalesces.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from pyweft.storage import Expect, Put, SQLiteStorage

VALUE = b"x" * 200


async def sequential_cas(path: Path, synchronous: str, n: int) -> float:
    storage = SQLiteStorage(path, synchronous=synchronous)
    try:
        started = time.perf_counter()
        for i in range(n):
            key = f"seq:{i:08d}"
            if not await storage.conditional_batch(
                [Expect(key=key, value=None)], [Put(key=key, value=VALUE)]
            ):
                raise AssertionError(key)
        return n / (time.perf_counter() - started)
    finally:
        await storage.close()


async def sequential_get_cas(path: Path, synchronous: str, n: int) -> float:
    storage = SQLiteStorage(path, synchronous=synchronous)
    try:
        started = time.perf_counter()
        for i in range(n):
            key = f"step:{i:08d}"
            current = await storage.get(key)
            if not await storage.conditional_batch(
                [Expect(key=key, value=current)], [Put(key=key, value=VALUE)]
            ):
                raise AssertionError(key)
        return n / (time.perf_counter() - started)
    finally:
        await storage.close()


async def concurrent_batches(path: Path, synchronous: str, n: int, concurrency: int) -> float:
    storage = SQLiteStorage(path, synchronous=synchronous)
    per_task = n // concurrency

    async def worker(w: int) -> None:
        for i in range(per_task):
            key = f"con:{w:04d}:{i:08d}"
            await storage.conditional_batch(
                [Expect(key=key, value=None)], [Put(key=key, value=VALUE)]
            )

    try:
        started = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        return per_task * concurrency / (time.perf_counter() - started)
    finally:
        await storage.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pyweft-bench-") as tmp:
        for synchronous in ("FULL", "NORMAL"):
            db = Path(tmp) / f"bench-{synchronous}.db"
            seq = await sequential_cas(db.with_suffix(".seq.db"), synchronous, args.n)
            step = await sequential_get_cas(db.with_suffix(".step.db"), synchronous, args.n)
            con = await concurrent_batches(
                db.with_suffix(".con.db"), synchronous, args.n * 4, args.concurrency
            )
            print(
                f"synchronous={synchronous:<6}  sequential CAS {seq:8,.0f}/s   "
                f"sequential get+CAS {step:8,.0f}/s   "
                f"{args.concurrency} concurrent {con:8,.0f} batches/s"
            )


if __name__ == "__main__":
    asyncio.run(main())
