"""Worker process for the signal-handler SIGKILL tests.

``python handlers_worker.py DB COUNT WHEN [relay]``
    Opens an engine on the SQLite file ``DB`` (recovering what a killed worker left
    running), starts run ``tally`` (``on_conflict="use_existing"``) and prints its
    result as JSON once it ends. ``tally`` applies ``add`` signals with a handler
    until it holds ``COUNT`` of them, then runs one activity and returns them.
    ``WHEN`` is ``before`` or ``after`` to SIGKILL this process right before (or
    right after) the first batch that applies signals reaches (left) SQLite, or
    ``never``. Nothing in ``src/`` is patched: only the moment of death is chosen.

    With ``relay``, run ``relay`` also starts: it sends ``tally`` COUNT ``add`` signals
    with ``ctx.signal_workflow``, and the kill comes right after the first batch that
    buffers one of them (before the sending step is recorded).

``python handlers_worker.py DB 0 WHEN update``
    Drives run ``orders`` instead: its ``async def`` update handler ``buy`` runs the
    activity ``charge`` (which appends a line to the file ``$PYWEFT_LEDGER`` for each
    execution) and answers with its receipt. ``WHEN=after`` kills the process right
    after the batch that records the handler's activity step reached SQLite, before
    the answer is written. ``close`` (a plain handler) lets the run end.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from pyweft import Engine, WorkflowContext, activity, open_storage, workflow
from pyweft.storage import Delete, Expect, Put, Storage


class KillAtHandlerCommit:
    """A real store that SIGKILLs its own process at the first batch applying signals."""

    def __init__(self, inner: Storage, when: str, prefix: str) -> None:
        self._inner = inner
        self._when = when
        self._prefix = prefix

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def conditional_batch(
        self, conditions: Sequence[Expect], ops: Sequence[Put | Delete]
    ) -> bool:
        applies = any(isinstance(op, Put) and op.key.startswith(self._prefix) for op in ops)
        if applies and self._when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        ok = await self._inner.conditional_batch(conditions, ops)
        if applies and self._when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return ok


@activity
async def total(values: list[int]) -> int:
    return sum(values)


@workflow
async def tally(ctx: WorkflowContext, count: int) -> dict[str, Any]:
    seen: list[int] = []
    ctx.on_signal("add", seen.append)
    ctx.on_query("seen", lambda: list(seen))
    await ctx.wait_until(lambda: len(seen) >= count)
    return {"seen": seen, "total": await ctx.run(total, seen)}


@activity
def charge(item: str) -> str:
    with open(os.environ["PYWEFT_LEDGER"], "a") as ledger:
        ledger.write(item + "\n")
    return f"charged {item}"


@workflow
async def orders(ctx: WorkflowContext) -> list[str]:
    bought: list[str] = []
    closed = False

    @ctx.on_update("buy")
    async def buy(item: str) -> str:
        receipt = await ctx.run(charge, item)
        bought.append(item)
        return receipt

    @ctx.on_update("close")
    def close() -> None:
        nonlocal closed
        closed = True

    await ctx.wait_until(lambda: closed)
    await ctx.all_handlers_finished()
    return bought


@workflow
async def relay(ctx: WorkflowContext, count: int) -> int:
    for i in range(count):
        await ctx.signal_workflow("tally", "add", i)
    return count


async def main_orders(db: str, when: str) -> None:
    from pyweft.engine.replay import keys

    # The journal key of the handler's first step (invocation 0, step 1).
    prefix = keys.journal("orders", keys.handler_step(0, 1))
    store = KillAtHandlerCommit(open_storage(f"sqlite:///{db}"), when, prefix)
    async with Engine(store, workflows=[orders], poll_interval=0.05) as engine:  # type: ignore[arg-type]
        handle = await engine.start(orders, id="orders", on_conflict="use_existing")
        print(json.dumps(await handle.result(timeout=60)), flush=True)


async def main(db: str, count: int, when: str, relaying: bool) -> None:
    prefix = "sig:tally:" if relaying else "wf:tally:u:"
    store = KillAtHandlerCommit(open_storage(f"sqlite:///{db}"), when, prefix)
    async with Engine(store, workflows=[tally, relay], poll_interval=0.05) as engine:  # type: ignore[arg-type]
        handle = await engine.start(tally, count, id="tally", on_conflict="use_existing")
        if relaying:
            await engine.start(relay, count, id="relay", on_conflict="use_existing")
        print(json.dumps(await handle.result(timeout=60)), flush=True)


if __name__ == "__main__":
    if sys.argv[4:] == ["update"]:
        asyncio.run(main_orders(sys.argv[1], sys.argv[3]))
    else:
        asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:] == ["relay"]))
