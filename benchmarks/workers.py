"""Activity task queues through worker processes: dispatch latency and throughput.

    .venv/bin/python benchmarks/workers.py latency sqlite|postgres [N]
    .venv/bin/python benchmarks/workers.py throughput sqlite|postgres [RUNS] [STEPS] [WORKERS]

``latency``: one engine (``serve_queues=[]``) runs one workflow of N sequential
no-op activities; one worker in another process claims each. Dispatch latency is
the worker's claim time minus the task's write time (same machine clock).

``throughput``: RUNS workflows of STEPS no-op activities each, all started at once,
served by WORKERS worker processes; prints activities/s and the CPU seconds the
engine and the workers used per activity.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from pyweft import Engine, Worker, WorkflowContext, activity, workflow

PG = "postgresql://postgres@127.0.0.1:5432/postgres"


@activity(queue="bench")
async def noop(x: int) -> int:
    return x


@workflow
async def steps(ctx: WorkflowContext, n: int) -> int:
    for i in range(n):
        await ctx.run(noop, i)
    return n


async def serve(url: str, out: str) -> None:
    w = Worker(url, activities=[noop], queues=["bench"], concurrency=64, poll_interval=0.5)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    import signal

    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with w:
        await stop.wait()
        lat = list(w.dispatch_latencies)
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    report = {"lat": lat, "cpu": cpu.ru_utime + cpu.ru_stime, "done": w.completed}
    await asyncio.to_thread(_write, out, json.dumps(report))


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def spawn_workers(url: str, n: int, tmp: str) -> list[tuple[subprocess.Popen[bytes], str]]:
    procs = []
    for i in range(n):
        out = os.path.join(tmp, f"w{i}.json")
        procs.append((subprocess.Popen([sys.executable, __file__, "_worker", url, out]), out))
    time.sleep(2.0)  # imports and registration (before the engine needs its loop)
    return procs


def stop_workers(procs: list[tuple[subprocess.Popen[bytes], str]]) -> list[dict]:
    import signal

    for p, _ in procs:
        p.send_signal(signal.SIGTERM)
    out = []
    for p, path in procs:
        p.wait(60)
        with open(path) as f:
            out.append(json.load(f))
    return out


def store_url(kind: str, tmp: str) -> tuple[str, str | None]:
    if kind == "sqlite":
        return f"sqlite:///{tmp}/bench.db", None
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    return f"{PG}?schema={schema}", schema


def drop(schema: str | None) -> None:
    if schema:
        import psycopg

        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def latency(kind: str, n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url, schema = store_url(kind, tmp)
        try:
            async with Engine(url, workflows=[steps], serve_queues=[]) as engine:
                procs = await asyncio.to_thread(spawn_workers, url, 1, tmp)
                await (await engine.start(steps, 20, id="warm")).result(timeout=60)
                t0 = time.perf_counter()
                await (await engine.start(steps, n, id="lat")).result(timeout=600)
                elapsed = time.perf_counter() - t0
                stats = await asyncio.to_thread(stop_workers, procs)
            lat = sorted(stats[0]["lat"][20:])
            q = statistics.quantiles(lat, n=100)
            print(
                f"{kind}: dispatch latency over {len(lat)} tasks: p50 {q[49] * 1000:.2f} ms, "
                f"p90 {q[89] * 1000:.2f} ms, p99 {q[98] * 1000:.2f} ms; "
                f"round trip per activity {elapsed / n * 1000:.2f} ms"
            )
        finally:
            drop(schema)


async def throughput(kind: str, runs: int, n: int, workers: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url, schema = store_url(kind, tmp)
        try:
            async with Engine(url, workflows=[steps], serve_queues=[]) as engine:
                procs = await asyncio.to_thread(spawn_workers, url, workers, tmp)
                await (await engine.start(steps, 5, id="warm")).result(timeout=60)
                cpu0 = resource.getrusage(resource.RUSAGE_SELF)
                t0 = time.perf_counter()
                handles = [await engine.start(steps, n, id=f"r{i}") for i in range(runs)]
                await asyncio.gather(*(h.result(timeout=600) for h in handles))
                elapsed = time.perf_counter() - t0
                cpu1 = resource.getrusage(resource.RUSAGE_SELF)
                stats = await asyncio.to_thread(stop_workers, procs)
            total = runs * n
            engine_cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
            worker_cpu = sum(s["cpu"] for s in stats)
            print(
                f"{kind}: {runs} runs x {n} no-op activities via {workers} worker processes: "
                f"{total / elapsed:,.0f} activities/s ({elapsed:.2f}s); CPU per activity: "
                f"engine {engine_cpu / total * 1e6:.0f} us, "
                f"workers {worker_cpu / total * 1e6:.0f} us (workers' whole life), "
                f"per worker done: {[s['done'] for s in stats]}"
            )
        finally:
            drop(schema)


def main() -> None:
    mode = sys.argv[1]
    if mode == "_worker":
        asyncio.run(serve(sys.argv[2], sys.argv[3]))
    elif mode == "latency":
        asyncio.run(latency(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 500))
    else:
        args = [int(a) for a in sys.argv[3:]] + [200, 10, 2][len(sys.argv) - 3 :]
        asyncio.run(throughput(sys.argv[2], *args[:3]))


if __name__ == "__main__":
    main()
