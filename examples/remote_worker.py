"""A Python remote worker: the activities of ``pyweft conformance``, over the task stream.

    PYWEFT_WORKER_URL=ws://127.0.0.1:8000/api/v1/tasks/conformance/stream \\
    PYWEFT_WORKER_TOKEN=pwk_... python examples/remote_worker.py

    pyweft conformance -- python examples/remote_worker.py
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from pyweft import ApplicationError, activity
from pyweft.worker.remote import RemoteWorker


@activity(name="conformance.echo")
async def echo(value: Any) -> Any:
    return value


@activity(name="conformance.sleep")
async def sleep(ms: int) -> int:
    await asyncio.sleep(ms / 1000)  # a cancelled attempt stops here
    return ms


@activity(name="conformance.fail")
async def fail(message: str) -> None:
    raise ApplicationError(message, type="ConformanceError", non_retryable=True)


async def main() -> None:
    worker = RemoteWorker(
        os.environ.get("PYWEFT_WORKER_URL", "http://127.0.0.1:8000"),
        token=os.environ.get("PYWEFT_WORKER_TOKEN"),
        activities=[echo, sleep, fail],
        queues=[os.environ.get("PYWEFT_WORKER_QUEUE", "conformance")],
        concurrency=4,
    )
    await worker.run()  # until SIGTERM/SIGINT or the server's shutdown


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    asyncio.run(main())
