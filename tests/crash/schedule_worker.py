"""One engine process for the multi-engine schedule test (tests/crash/test_schedule_processes.py).

Usage: ``schedule_worker.py STORE_URL LEDGER NAME SECONDS``. Opens an engine on the
shared PostgreSQL store with the code-declared schedule ``beat`` (every second),
writes ``READY NAME`` to the ledger once open, and for every execution of the
``record`` activity writes ``DID NAME RUN_ID NOMINAL``. After SECONDS (or on
SIGTERM) it shuts down and writes ``STOPPED NAME``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys

from pyweft import Engine, WorkflowContext, activity, workflow

STORE, LEDGER, NAME, SECONDS = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
_fd = os.open(LEDGER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def note(line: str) -> None:
    os.write(_fd, (line + "\n").encode())
    os.fsync(_fd)


@activity
def record(run_id: str, nominal: float) -> str:
    note(f"DID {NAME} {run_id} {nominal:.3f}")
    return NAME


@workflow(name="beat", schedule="* * * * * *")  # every second (6 fields: seconds first)
async def beat(ctx: WorkflowContext) -> str:
    nominal = ctx.info.nominal_time
    assert nominal is not None
    return await ctx.run(record, ctx.workflow_id, nominal.timestamp())


async def main() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with Engine(
        STORE, workflows=[beat], activities=[record], claim_ttl=3.0, claim_renew_interval=0.5
    ):
        note(f"READY {NAME}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SECONDS)
    note(f"STOPPED {NAME}")


if __name__ == "__main__":
    asyncio.run(main())
