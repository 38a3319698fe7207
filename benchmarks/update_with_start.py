"""Update-with-start round trip on SQLite.

    .venv/bin/python benchmarks/update_with_start.py [--samples 500] [--sync FULL|NORMAL]

Sequential ``engine.update_with_start`` calls, timed from the call to the
update's answer: first on ids that do not exist (the run is created with the
update in one write, replays its first step and answers), then again on the same
runs (they exist: a plain update). Reported as p50/p90/p99 in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from pyweft import Engine, WorkflowContext, workflow


@workflow
async def account(ctx: WorkflowContext, owner: str) -> int:
    balance = {"n": 0}

    def deposit(amount: int) -> int:
        balance["n"] += amount
        return balance["n"]

    ctx.on_update("deposit", deposit)
    await ctx.wait_for_signal("close")
    return balance["n"]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def show(name: str, ms: list[float]) -> None:
    print(
        f"{name}: p50 {pct(ms, 50):.2f} ms  p90 {pct(ms, 90):.2f}  p99 {pct(ms, 99):.2f}  "
        f"({len(ms)} calls)"
    )


async def main(samples: int, sync: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}?synchronous={sync}"
        async with Engine(url, workflows=[account]) as engine:
            for i in range(20):  # warm up
                await engine.update_with_start(account, "w", update=("deposit", 1), id=f"w{i}")
            created: list[float] = []
            for i in range(samples):
                began = time.perf_counter()
                _, answer = await engine.update_with_start(
                    account, "o", update=("deposit", 5), id=f"acct-{i}"
                )
                created.append((time.perf_counter() - began) * 1000)
                assert answer == 5
            existing: list[float] = []
            for i in range(samples):
                began = time.perf_counter()
                _, answer = await engine.update_with_start(
                    account, "o", update=("deposit", 5), id=f"acct-{i}"
                )
                existing.append((time.perf_counter() - began) * 1000)
                assert answer == 10
    print(f"SQLite synchronous={sync}")
    show("absent run (created with the update)", created)
    show("existing run (update only)", existing)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--sync", default="FULL", choices=["FULL", "NORMAL"])
    ns = parser.parse_args()
    asyncio.run(main(ns.samples, ns.sync))
