"""An engine on SQLite serving a workflow queue whose runs block until released.

Usage: ``python queue_sqlite_worker.py DB_PATH LEDGER RELEASE``. Each run's activity
appends ``B run pid`` to LEDGER, waits until the file RELEASE exists, appends
``E run pid``, and reports how many runs of this process were inside at once.
Imported by ``test_queue_sigkill_sqlite.py`` for the restarted engine.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from pathlib import Path

from pyweft import Engine, Queue, WorkflowContext, activity, workflow

QUEUE = Queue("held", concurrency=2)
_paths: dict[str, Path] = {}
_lock = threading.Lock()
inside = 0
most_inside = 0


def configure(ledger: Path, release: Path) -> None:
    _paths.update(ledger=ledger, release=release)


def _write(line: str) -> None:
    fd = os.open(_paths["ledger"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


@activity
def hold(run_id: str) -> str:
    global inside, most_inside
    with _lock:
        inside += 1
        most_inside = max(most_inside, inside)
    try:
        _write(f"B {run_id} {os.getpid()}")
        deadline = time.monotonic() + 60
        while not _paths["release"].exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        _write(f"E {run_id} {os.getpid()}")
        return run_id
    finally:
        with _lock:
            inside -= 1


@workflow
async def held_job(ctx: WorkflowContext, run_id: str) -> str:
    return await ctx.run(hold, run_id)


async def serve(db: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with Engine(db, workflows=[held_job], activities=[hold], queues=[QUEUE]):
        await stop.wait()


if __name__ == "__main__":
    db_path, ledger, release = sys.argv[1:4]
    configure(Path(ledger), Path(release))
    asyncio.run(serve(f"sqlite:///{db_path}"))
