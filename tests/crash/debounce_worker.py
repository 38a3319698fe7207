"""A caller process for the debounce process test.

``python debounce_worker.py STORE_URL KEY CALLS GO_FILE``
    Opens a client engine, prints ``READY``, waits until ``GO_FILE`` exists (so every
    caller fires together), makes ``CALLS`` concurrent ``engine.debounce`` calls for
    ``KEY`` (argument: this process id and the call number) and prints each run id.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from pyweft import Engine, WorkflowContext, workflow


@workflow
async def collapse(ctx: WorkflowContext, who: str) -> str:
    return who


def _wait_for(go: Path) -> None:
    while not go.exists():
        time.sleep(0.005)


async def main(url: str, key: str, calls: int, go: Path) -> None:
    async with Engine(url, workflows=[collapse], role="client") as engine:
        print("READY", flush=True)
        await asyncio.to_thread(_wait_for, go)
        handles = await asyncio.gather(
            *(
                engine.debounce(key, collapse, f"{os.getpid()}-{i}", period=3600)
                for i in range(calls)
            )
        )
        for handle in handles:
            print("ID", handle.id, flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])))
