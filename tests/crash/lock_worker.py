"""One engine process for the lock reclaim test (tests/crash/test_lock_processes.py).

Usage: ``lock_worker.py STORE_URL LEDGER``. Starts run ``a`` of ``guarded``, which
takes the lock and waits for a signal; writes ``HOLDING`` to the ledger once it holds
the lock, then waits to be killed.
"""

from __future__ import annotations

import asyncio
import os
import sys

from pyweft import Engine, WorkflowContext, workflow

STORE, LEDGER = sys.argv[1], sys.argv[2]


def note(line: str) -> None:
    fd = os.open(LEDGER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@workflow(name="guarded")
async def guarded(ctx: WorkflowContext, who: str) -> str:
    async with ctx.lock("printer", lease="3s"):
        if not ctx.is_replaying:
            note(f"HOLDING {who} {os.getpid()}")
        await ctx.wait_for_signal("done")
    return who


async def main() -> None:
    async with Engine(STORE, workflows=[guarded], claim_ttl=2.0, claim_renew_interval=0.5) as e:
        await e.start(guarded, "a", id="a")
        await asyncio.Event().wait()  # until SIGKILL


if __name__ == "__main__":
    asyncio.run(main())
