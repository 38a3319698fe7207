"""A deliberately broken remote worker, speaking the task protocol by hand.

``BROKEN_MODE`` picks the defect: ``wrong-echo`` (echo returns something else),
``no-heartbeat`` (never heartbeats), ``ignore-cancel`` (keeps running cancelled
attempts and reports them completed), ``abrupt-shutdown`` (exits 3 on shutdown
without finishing). ``pyweft conformance`` must fail each of them.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from websockets.asyncio.client import connect

MODE = os.environ.get("BROKEN_MODE", "wrong-echo")


async def main() -> None:
    headers = {"Authorization": f"Bearer {os.environ['PYWEFT_WORKER_TOKEN']}"}
    async with connect(os.environ["PYWEFT_WORKER_URL"], additional_headers=headers) as ws:
        await ws.send(
            json.dumps(
                {
                    "type": "register",
                    "protocolVersion": 1,
                    "activities": os.environ["PYWEFT_WORKER_ACTIVITIES"].split(","),
                    "concurrency": 4,
                }
            )
        )
        ack = json.loads(await ws.recv())
        assert ack["type"] == "registerAck", ack
        running: dict[str, asyncio.Task[None]] = {}

        async def beat() -> None:
            while MODE != "no-heartbeat":
                await asyncio.sleep(ack["heartbeatIntervalMs"] / 1000)
                await ws.send(json.dumps({"type": "heartbeat"}))

        async def run(task: dict[str, Any]) -> None:
            name, args = task["activityName"], task["input"]
            reply = {
                "type": "taskResult",
                "operationId": task["operationId"],
                "attemptToken": task["attemptToken"],
            }
            if name == "conformance.echo":
                value = {"not": "what was sent"} if MODE == "wrong-echo" else args[0]
                reply.update(status="completed", value=value)
            elif name == "conformance.sleep":
                await asyncio.sleep(args[0] / 1000)
                reply.update(status="completed", value=args[0])
            else:
                reply.update(
                    status="failed",
                    error={"message": args[0], "type": "ConformanceError", "nonRetryable": True},
                )
            await ws.send(json.dumps(reply))

        beater = asyncio.create_task(beat())
        async for text in ws:
            frame = json.loads(text)
            if frame["type"] == "task":
                running[frame["operationId"]] = asyncio.create_task(run(frame))
            elif frame["type"] == "cancel" and MODE != "ignore-cancel":
                job = running.pop(frame["operationId"], None)
                if job is not None:
                    job.cancel()
                    await ws.send(
                        json.dumps(
                            {
                                "type": "taskResult",
                                "operationId": frame["operationId"],
                                "attemptToken": frame["attemptToken"],
                                "status": "cancelled",
                            }
                        )
                    )
            elif frame["type"] == "shutdown":
                if MODE == "abrupt-shutdown":
                    sys.exit(3)
                await asyncio.gather(*running.values(), return_exceptions=True)
                await ws.close()
                break
        beater.cancel()


if __name__ == "__main__":
    asyncio.run(main())
