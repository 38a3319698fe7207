"""Signal-handler throughput: one run applying buffered signals through ``ctx.on_signal``.

Target (issue 16): ≥ 3,000 signals/s on SQLite with ``synchronous=FULL`` for one run
applying 10,000 buffered signals.

The signals are buffered first (the run is started with ``start_delay`` so it does not
take them one by one as they come); the clock starts when the run is allowed to start
and stops when it has applied all of them and returned. Also printed: the same with the
signals arriving while the run is live (each send wakes it), and the send rate.

    .venv/bin/python benchmarks/signal_handlers.py [--signals 10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from pyweft import Engine, VirtualClock, WorkflowContext, workflow


@workflow
async def counter(ctx: WorkflowContext, count: int) -> int:
    seen = total = 0

    def add(n: int) -> None:
        nonlocal seen, total
        seen, total = seen + 1, total + n

    ctx.on_signal("add", add)
    await ctx.wait_until(lambda: seen >= count)
    return total


async def buffered(db: Path, signals: int) -> tuple[float, float]:
    clock = VirtualClock()
    url = f"sqlite:///{db}?synchronous=FULL"
    async with Engine(url, workflows=[counter], clock=clock) as engine:
        handle = await engine.start(counter, signals, id="c", start_delay=1)
        t0 = time.perf_counter()
        await asyncio.gather(*(engine.signal("c", "add", 1) for _ in range(signals)))
        send_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        clock.advance(2)
        assert await handle.result(timeout=600) == signals
        return signals / send_s, signals / (time.perf_counter() - t1)


async def live(db: Path, signals: int) -> float:
    url = f"sqlite:///{db}?synchronous=FULL"
    async with Engine(url, workflows=[counter]) as engine:
        handle = await engine.start(counter, signals, id="c")
        t0 = time.perf_counter()
        await asyncio.gather(*(engine.signal("c", "add", 1) for _ in range(signals)))
        assert await handle.result(timeout=600) == signals
        return signals / (time.perf_counter() - t0)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--signals", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.runs):
            send, apply = await buffered(Path(d) / f"b{i}.db", args.signals)
            print(
                f"run {i + 1}: {args.signals} buffered signals applied by a handler: "
                f"{apply:,.0f} signals/s (sending them: {send:,.0f} signals/s)"
            )
        for i in range(args.runs):
            rate = await live(Path(d) / f"l{i}.db", args.signals)
            print(f"run {i + 1}: {args.signals} signals sent to a live run: {rate:,.0f} signals/s")


if __name__ == "__main__":
    asyncio.run(main())
