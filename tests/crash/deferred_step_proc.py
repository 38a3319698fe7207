"""A process of the deferred-step SIGKILL tests: an orchestrating engine, or a worker.

    python deferred_step_proc.py engine URL LEDGER N_RUNS OUT WHEN   start or resume runs
    python deferred_step_proc.py worker URL LEDGER                   serve queue "deferred"

A worker-served step's record is written with the run's next commit (the next
task, or the run's end), not on its own. ``WHEN`` picks the moment the engine
SIGKILLs itself, right before that batch reaches the store: ``next-task`` (the
third batch that carries a step record together with a new task), ``end`` (the
first end of a run that carries a step record), or ``never``. Nothing in
``src/`` is patched: only the moment of death is chosen.

Every execution of the activity appends ``RUN STEP ATTEMPT`` to ``LEDGER`` (one
``os.write`` on an ``O_APPEND`` descriptor: a line is whole or absent).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from pyweft import Engine, Worker, WorkflowContext, activity, activity_context, open_storage
from pyweft import workflow as workflow_
from pyweft.storage import Delete, Expect, Put, Storage

STEPS = 5
_ledger: list[int] = []


@activity(queue="deferred")
async def bump(x: int) -> int:
    ctx = activity_context()
    os.write(_ledger[0], f"{ctx.workflow_id} {ctx.step} {ctx.attempt}\n".encode())
    return x * 2 + 1


@workflow_
async def doubling(ctx: WorkflowContext, x: int) -> list[int]:
    out = []
    for _ in range(STEPS):
        x = await ctx.run(bump, x)
        out.append(x)
    return out


def expected(x: int) -> list[int]:
    out = []
    for _ in range(STEPS):
        x = x * 2 + 1
        out.append(x)
    return out


def _journal_put(ops: Sequence[Put | Delete]) -> bool:
    return any(isinstance(op, Put) and ":j:" in op.key for op in ops)


class KillBeforeFusedWrite:
    """A real store that SIGKILLs its process before the chosen batch is written."""

    def __init__(self, inner: Storage, when: str) -> None:
        self._inner = inner
        self._when = when
        self._seen = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def conditional_batch(
        self, conditions: Sequence[Expect], ops: Sequence[Put | Delete]
    ) -> bool:
        if _journal_put(ops):
            puts = [op.key for op in ops if isinstance(op, Put)]
            with_task = any(k.startswith("tk:t:") for k in puts)
            ends = any(k.startswith("wf:") and k.count(":") == 1 for k in puts)
            if (self._when == "next-task" and with_task) or (self._when == "end" and ends):
                self._seen += 1
                if self._seen == (3 if self._when == "next-task" else 1):
                    os.kill(os.getpid(), signal.SIGKILL)
        return await self._inner.conditional_batch(conditions, ops)


async def engine_main(url: str, n_runs: int, out: str, when: str) -> None:
    store = KillBeforeFusedWrite(open_storage(url), when)
    async with Engine(store, workflows=[doubling], serve_queues=[], poll_interval=0.2) as eng:
        handles = [
            await eng.start(doubling, i, id=f"run-{i:03d}", on_conflict="use_existing")
            for i in range(n_runs)
        ]
        results = await asyncio.gather(*(h.result(timeout=60) for h in handles))
    await asyncio.to_thread(_write, out, json.dumps(results))


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


async def worker_main(url: str) -> None:
    await Worker(url, activities=[bump], queues=["deferred"], poll_interval=0.2).run()


def main(argv: list[str]) -> None:
    mode, url, ledger = argv[1], argv[2], argv[3]
    _ledger.append(os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    if mode == "engine":
        asyncio.run(engine_main(url, int(argv[4]), argv[5], argv[6]))
    else:
        asyncio.run(worker_main(url))


if __name__ == "__main__":
    main(sys.argv)
