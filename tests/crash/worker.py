"""A worker process for the SIGKILL crash tests.

Usage: ``python worker.py DB_PATH LEDGER_PATH N_RUNS SEED [MODE]``

Opens an engine on the SQLite file ``DB_PATH`` (recovering whatever an
earlier, killed worker left running), starts runs ``run-0`` ...
``run-{N_RUNS-1}`` with ``on_conflict="use_existing"``, waits for every
result, checks it, writes ``DONE`` to the ledger and exits 0. MODE is
``mix`` (the default: long plans of async, sync, flaky and concurrent
activities and short sleeps) or ``nap`` (one activity, a 1 s sleep, one
activity). The process-lifetime name written on every ledger line comes
from ``$CRASHKIT_LIFETIME``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`

from pyweft import Engine, RetryPolicy, WorkflowContext, activity, workflow
from support import crashkit as kit

_ledger: kit.Ledger | None = None


def ledger() -> kit.Ledger:
    assert _ledger is not None
    return _ledger


@activity
async def twist(run_id: str, label: str, x: int, work_s: float) -> int:
    n = ledger().begin(run_id, label)
    await asyncio.sleep(work_s)
    ledger().end(run_id, label, n)
    return kit.twist_value(x)


@activity
def crunch(run_id: str, label: str, x: int, work_s: float) -> int:
    n = ledger().begin(run_id, label)
    time.sleep(work_s)  # runs in the engine's activity thread pool
    ledger().end(run_id, label, n)
    return kit.crunch_value(x)


@activity(retry=RetryPolicy(max_attempts=5, initial_interval=0.01, backoff=1.0))
async def flaky(run_id: str, label: str, x: int, work_s: float) -> int:
    n = ledger().begin(run_id, label)
    await asyncio.sleep(work_s)
    if n == 1:  # the first execution of this call ever, whichever process ran it
        ledger().fail(run_id, label, n)
        raise RuntimeError(f"{run_id}/{label}: first attempt fails by design")
    ledger().end(run_id, label, n)
    return kit.flaky_value(x)


ACTIVITIES: dict[str, Callable[..., Any]] = {"async": twist, "sync": crunch, "flaky": flaky}


@workflow
async def crash_plan(ctx: WorkflowContext, run_id: str, seed: int, mode: str) -> int:
    x = kit.origin(run_id)
    for phase, step in enumerate(kit.plan_for(run_id, seed, mode), start=1):
        if step.kind == "sleep":
            await ctx.sleep(step.work_s)
        elif step.kind == "pair":
            left, right = await asyncio.gather(
                ctx.run(twist, run_id, kit.label(phase, "L"), x, step.work_s),
                ctx.run(crunch, run_id, kit.label(phase, "R"), x, step.work2_s),
            )
            x = kit.combine(left, right)
        else:
            x = await ctx.run(ACTIVITIES[step.kind], run_id, kit.label(phase), x, step.work_s)
        # Reached only once every step of this phase has returned, which the
        # engine allows only after committing it: proof for the checker.
        ledger().mark(run_id, phase)
    return x


async def main(db: str, ledger_path: str, n_runs: int, seed: int, mode: str) -> int:
    global _ledger
    lifetime = os.environ.get("CRASHKIT_LIFETIME") or f"{os.getpid()}-{time.time_ns()}"
    _ledger = kit.Ledger(ledger_path, lifetime)
    _ledger.start()
    stagger = random.Random(f"{seed}/starts")
    store = db if "://" in db else f"sqlite:///{db}"  # a store URL, or an SQLite file
    async with Engine(store, workflows=[crash_plan]) as engine:
        handles = []
        for i in range(n_runs):
            run_id = f"run-{i}"
            handles.append(
                await engine.start(
                    crash_plan, run_id, seed, mode, id=run_id, on_conflict="use_existing"
                )
            )
            await asyncio.sleep(stagger.uniform(0.0, 0.01))  # spread creation over time
        results = await asyncio.gather(*(h.result() for h in handles))
    wrong = {
        h.id: r for h, r in zip(handles, results, strict=True)
        if r != kit.expected_result(h.id, seed, mode)
    }  # fmt: skip
    if wrong:
        print(f"wrong results: {wrong}", file=sys.stderr)
        return 1
    _ledger.done()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    db_path, ledger_file, runs, seed_arg = sys.argv[1:5]
    run_mode = sys.argv[5] if len(sys.argv) > 5 else "mix"
    sys.exit(asyncio.run(main(db_path, ledger_file, int(runs), int(seed_arg), run_mode)))
