"""A process of the task-queue crash tests: an engine that orchestrates, or a worker.

    python task_queue_proc.py engine URL LEDGER N_RUNS OUT   start N_RUNS runs, wait, write OUT
    python task_queue_proc.py worker URL LEDGER ID           serve queues qa and qb

Every activity execution appends ``BEGIN``/``END`` lines (one ``os.write`` each on
an ``O_APPEND`` descriptor, so a line is whole or absent after SIGKILL) naming the
step it runs, its attempt and this process's worker id.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time

from pyweft import (
    Engine,
    RetryPolicy,
    Worker,
    WorkflowContext,
    activity,
    activity_context,
    workflow,
)

STEPS = 4  # activities per run, alternating queues qa and qb
VISIBILITY_S = 3.0
QA_CONCURRENCY = 3
QB_RATE, QB_WINDOW_S = 40, 0.25

_ledger_fd: list[int] = []
_who: list[str] = ["?"]


def note(kind: str) -> None:
    """``KIND run/step attempt worker time queue claimed_at`` (times: epoch seconds)."""
    ctx = activity_context()
    queue = "qa" if ctx.activity == "work_a" else "qb"
    line = (
        f"{kind} {ctx.workflow_id}/{ctx.step} {ctx.attempt} {_who[0]} {time.time():.6f} "
        f"{queue} {ctx.started_at.timestamp():.6f}\n"
    )
    os.write(_ledger_fd[0], line.encode())


RETRY = RetryPolicy(max_attempts=5, initial_interval=0.05)


@activity(queue="qa", retry=RETRY, visibility_timeout=VISIBILITY_S)
async def work_a(x: int) -> int:
    note("BEGIN")
    await asyncio.sleep(random.uniform(0.005, 0.03))
    note("END")
    return x * 3 + 1


@activity(queue="qb", retry=RETRY, visibility_timeout=VISIBILITY_S)
def work_b(x: int) -> int:
    note("BEGIN")
    time.sleep(random.uniform(0.005, 0.03))
    note("END")
    return x * 5 + 2


@activity(queue="slow", visibility_timeout=VISIBILITY_S)
async def linger(x: int) -> int:
    note("BEGIN")
    await asyncio.sleep(0.8)
    note("END")
    return x + 100


@workflow
async def chain(ctx: WorkflowContext, x: int) -> list[int]:
    out = []
    for i in range(STEPS):
        x = await ctx.run(work_a if i % 2 == 0 else work_b, x)
        out.append(x)
    return out


def expected(x: int) -> list[int]:
    out = []
    for i in range(STEPS):
        x = x * 3 + 1 if i % 2 == 0 else x * 5 + 2
        out.append(x)
    return out


async def engine_main(url: str, n_runs: int, out: str) -> None:
    async with Engine(url, workflows=[chain], serve_queues=[], poll_interval=0.2) as engine:
        # Limits the checks verify across every worker, the killed one included.
        await engine.set_activity_queue_limits("qa", concurrency=QA_CONCURRENCY)
        await engine.set_activity_queue_limits("qb", rate_limit=(QB_RATE, QB_WINDOW_S))
        handles = [await engine.start(chain, i, id=f"run-{i:04d}") for i in range(n_runs)]
        results = await asyncio.gather(*(h.result(timeout=120) for h in handles))
        await asyncio.to_thread(_write, out, json.dumps(results))


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


async def worker_main(url: str, worker_id: str) -> None:
    w = Worker(
        url,
        activities=[work_a, work_b],
        queues=["qa", "qb"],
        concurrency=8,
        worker_id=worker_id,
        poll_interval=0.2,
    )
    await w.run()


def open_ledger(path: str, who: str) -> None:
    _ledger_fd.append(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    _who[0] = who


# ``pyweft worker task_queue_proc`` imports this module: its ledger comes from the env.
if os.environ.get("TASK_QUEUE_LEDGER"):
    open_ledger(os.environ["TASK_QUEUE_LEDGER"], f"cli-{os.getpid()}")


def main(argv: list[str]) -> None:
    mode, url, ledger = argv[1], argv[2], argv[3]
    open_ledger(ledger, argv[4] if mode == "worker" else "engine")
    if mode == "engine":
        asyncio.run(engine_main(url, int(argv[4]), argv[5]))
    else:
        asyncio.run(worker_main(url, argv[4]))


if __name__ == "__main__":
    main(sys.argv)
