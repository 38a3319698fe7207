"""Activities through remote workers (the server's WebSocket task stream) on SQLite.

    .venv/bin/python benchmarks/remote_workers.py [RUNS] [STEPS] [WORKERS]

One process holds the engine (``serve_queues=[]``) and the server; WORKERS processes
run ``RemoteWorker`` (concurrency 64 each). First one run of 200 sequential no-op
activities (per-activity round trip: engine → store → server → socket → worker →
socket → server → store → engine), then RUNS runs of STEPS activities started at
once. Prints activities/s and CPU seconds per activity of the engine+server process
and of the workers.
"""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uvicorn

from pyweft import Engine, WorkflowContext, activity, workflow
from pyweft.server import ServerAuth, create_app
from pyweft.server.keys import ApiKeyStore


@activity(queue="bench")
async def noop(x: int) -> int:
    return x


@workflow
async def steps(ctx: WorkflowContext, n: int) -> int:
    for i in range(n):
        await ctx.run(noop, i)
    return n


async def work(url: str, token: str) -> None:
    from pyweft.worker import RemoteWorker

    await RemoteWorker(url, token=token, activities=[noop], queues=["bench"], concurrency=64).run()


def spawn(base: str, token: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, "work", base, token])


def cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


async def main(runs: int, n_steps: int, n_workers: int, profile: bool = False) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="pyweft-remote-bench-"))
    async with Engine(
        f"sqlite:///{tmp / 'bench.db'}", workflows=[steps], serve_queues=[], poll_interval=0.5
    ) as eng:
        _, token = await ApiKeyStore(eng.storage).create(subject="b", scopes=["workers:write"])
        app = create_app(eng, auth=ServerAuth())
        server = uvicorn.Server(uvicorn.Config(app, port=0, log_level="warning", lifespan="on"))
        import socket

        # asyncio turns Nagle off (TCP_NODELAY) only on sockets whose proto is TCP: with
        # socket.socket() a frame written right after another waits ~40 ms for an ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        procs = [spawn(base, token) for _ in range(n_workers)]
        hub = app.state.pyweft_tasks
        while len(hub.sessions) < n_workers:
            await asyncio.sleep(0.05)
        handle = await eng.start(steps, 200)
        t0 = time.perf_counter()
        await handle.result(timeout=120)
        seq = (time.perf_counter() - t0) / 200
        print(f"sequential: {seq * 1000:.2f} ms per activity round trip (200 in one run)")
        cpu0 = cpu(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        handles = [await eng.start(steps, n_steps) for _ in range(runs)]
        for h in handles:
            await h.result(timeout=600)
        wall = time.perf_counter() - t0
        engine_cpu = cpu(resource.RUSAGE_SELF) - cpu0
        total = runs * n_steps
        await hub.shutdown(timeout_s=10)
        for p in procs:
            await asyncio.to_thread(p.wait, 30)
        workers_cpu = cpu(resource.RUSAGE_CHILDREN)
        print(f"throughput: {total} activities in {wall:.2f}s = {total / wall:,.0f}/s")
        print(
            f"CPU per activity: engine+server {engine_cpu / total * 1e6:.0f} µs, "
            f"workers {workers_cpu / (total + 200) * 1e6:.0f} µs (whole life)"
        )
        print("load:", os.getloadavg())
        server.should_exit = True
        await serving


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "work":
        asyncio.run(work(sys.argv[2], sys.argv[3]))
    else:
        args = [int(a) for a in sys.argv[1:]] + [200, 10, 2][len(sys.argv) - 1 :]
        asyncio.run(main(*args[:3]))
