"""A remote worker process for the crash tests: serves ``linger`` on queue ``remote``
through the server's task stream.

    python remote_worker_proc.py URL TOKEN LEDGER

Each attempt appends ``BEGIN``/``END`` lines (``op attempt pid``) to LEDGER with one
``os.write`` on an ``O_APPEND`` descriptor, so a line is whole or absent after SIGKILL.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from pyweft import RetryPolicy, activity, activity_context
from pyweft.worker.remote import RemoteWorker

LINGER_S = float(os.environ.get("LINGER_S", "1.5"))
_ledger: list[int] = []


def note(kind: str) -> None:
    if not _ledger and os.environ.get("REMOTE_LEDGER"):
        _ledger.append(os.open(os.environ["REMOTE_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT))
    ctx = activity_context()
    line = f"{kind} {ctx.workflow_id}/{ctx.step} {ctx.attempt} {os.getpid()}\n"
    os.write(_ledger[0], line.encode())


@activity(queue="remote", retry=RetryPolicy(max_attempts=4, initial_interval=0.05))
async def linger(x: int) -> int:
    note("BEGIN")
    await asyncio.sleep(LINGER_S)
    note("END")
    return x + 100


async def main(url: str, token: str) -> None:
    worker = RemoteWorker(url, token=token, activities=[linger], queues=["remote"])
    await worker.run()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    _ledger.append(os.open(sys.argv[3], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    asyncio.run(main(sys.argv[1], sys.argv[2]))
