"""One engine serving the workflow queue of ``support.queuekit``, until killed or stopped.

Usage: ``python queue_worker.py URL SCHEMA ENGINE_ID``. Prints ``OPEN`` once the
engine is open; SIGTERM shuts it down cleanly.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`

from pyweft import Engine
from support import queuekit


async def main(url: str, engine_id: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with Engine(
        url,
        workflows=[queuekit.queued_job],
        activities=[queuekit.occupy],
        queues=[queuekit.QUEUE],
        engine_id=engine_id,
        ownership="workflow-lease",
        claim_ttl=1.5,
        claim_renew_interval=0.3,
        poll_interval=0.2,
    ):
        print("OPEN", flush=True)
        await stop.wait()


if __name__ == "__main__":
    from support.backends import with_schema

    url, schema, engine_id = sys.argv[1:4]
    queuekit.configure(url, schema)  # the activity's own connection, for the counters
    asyncio.run(main(with_schema(url, schema), engine_id))
