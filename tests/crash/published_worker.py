"""Worker process for the published events and streams process tests.

``python published_worker.py STORE_URL RUN_ID CHUNKS``
    Opens an engine on ``STORE_URL`` (recovering what a killed worker left
    running), starts run ``RUN_ID`` of ``streamer`` with ``on_conflict="use_existing"``,
    prints ``START`` and waits until the run has ended, then prints ``DONE``.

``streamer`` writes ``CHUNKS`` integers 0, 1, ... to its stream ``out``, publishes
its progress every 25 chunks as the event ``progress``, closes the stream and sets
the event ``done`` to the number of chunks it wrote.
"""

from __future__ import annotations

import asyncio
import sys

from pyweft import Engine, WorkflowContext, workflow


@workflow
async def streamer(ctx: WorkflowContext, chunks: int) -> int:
    out = ctx.stream("out")
    for i in range(chunks):
        await out.write(i)
        if i % 25 == 0:
            await ctx.set_event("progress", i)
    await out.close()
    await ctx.set_event("done", chunks)
    return chunks


async def main(url: str, run_id: str, chunks: int) -> None:
    async with Engine(url, workflows=[streamer], poll_interval=0.05, ownership="none") as engine:
        handle = await engine.start(streamer, chunks, id=run_id, on_conflict="use_existing")
        print("START", flush=True)
        await handle.result(timeout=120)
        print("DONE", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
