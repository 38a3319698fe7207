"""Activity task queues through worker processes: dispatch latency and throughput.

    .venv/bin/python benchmarks/workers.py latency sqlite|postgres [N]
    .venv/bin/python benchmarks/workers.py throughput sqlite|postgres [RUNS] [STEPS] [WORKERS]
    .venv/bin/python benchmarks/workers.py dbos latency|throughput [args as above]

``latency``: one engine (``serve_queues=[]``) runs one workflow of N sequential
no-op activities; one worker in another process claims each. Dispatch latency is
the worker's claim time minus the task's write time (same machine clock).

``throughput``: RUNS workflows of STEPS no-op activities each, all started at once,
served by WORKERS worker processes; prints activities/s, the dispatch latency
percentiles under that load, and the CPU time per activity of the engine, of the
workers and (PostgreSQL) of the server backends serving this benchmark's
connections, each over the timed part only (read from ``/proc``: the box may be
shared, so CPU per activity is the load-independent figure).

``dbos``: the same two shapes on DBOS Transact 3.4 queues on the same PostgreSQL
(see ``dbos_queues.py``), run in a virtualenv of its own under ``build/`` that this
script creates on first use: DBOS is never a dependency of the project.

``PYWEFT_BENCH_PROFILE=DIR`` writes cProfile files of the engine's timed part
(``engine.prof``) and of each worker's life (``worker-N.prof``) into DIR.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from pyweft import Engine, Worker, WorkflowContext, activity, workflow

PG = "postgresql://postgres@127.0.0.1:5432/postgres"
ROOT = Path(__file__).resolve().parent.parent
DBOS_VENV = ROOT / "build" / "dbos-3.4-venv"
_TICK = os.sysconf("SC_CLK_TCK")


@activity(queue="bench")
async def noop(x: int) -> int:
    return x


@workflow
async def steps(ctx: WorkflowContext, n: int) -> int:
    for i in range(n):
        await ctx.run(noop, i)
    return n


# --- round trips: every statement (and every take, two trips) this process sends ------

TRIPS = {"statements": 0, "takes": 0}


def count_trips() -> None:
    """Count this process's trips to PostgreSQL (a load-independent cost figure)."""
    from pyweft.storage.postgres import PostgresStorage

    query, take = PostgresStorage._query, getattr(PostgresStorage, "take", None)

    async def counted_query(self: PostgresStorage, *args: object) -> list[object]:
        TRIPS["statements"] += 1
        return await query(self, *args)  # type: ignore[arg-type]

    async def counted_take(self: PostgresStorage, *args: object, **kw: object) -> list[bool]:
        TRIPS["takes"] += 1
        return await take(self, *args, **kw)  # type: ignore[arg-type]

    PostgresStorage._query = counted_query  # type: ignore[method-assign]
    if take is not None:  # an older tree, for comparison, has no take
        PostgresStorage.take = counted_take  # type: ignore[method-assign]


def trips_line(counts: list[dict[str, int]], total: int) -> str:
    st = sum(c["statements"] for c in counts)
    tk = sum(c["takes"] for c in counts)
    return f"{st / total:.2f} statements + {tk / total:.2f} takes per activity"


# --- CPU accounting from /proc (this process, its workers, the PostgreSQL backends) ---


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def backend_pids(schema: str | None) -> list[int]:
    """The server processes of this benchmark's connections (their application_name)."""
    if schema is None:
        return []
    import psycopg

    with psycopg.connect(PG, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (f"pyweft:{schema}",),
        ).fetchall()
    return [r[0] for r in rows]


class CpuMeter:
    """CPU used between ``start()`` and ``stop()`` by groups of processes."""

    def __init__(self, groups: dict[str, list[int]], schema: str | None) -> None:
        self.groups = groups
        self.schema = schema
        self.before: dict[int, float] = {}
        self.used: dict[str, float] = {}

    def start(self) -> None:
        pids = [p for ps in self.groups.values() for p in ps] + backend_pids(self.schema)
        self.before = {p: proc_cpu(p) for p in pids}

    def stop(self) -> None:
        groups = dict(self.groups)
        if self.schema is not None:
            # Backends opened during the run count from zero (their start-up is small).
            groups["postgres"] = backend_pids(self.schema)
        self.used = {
            name: sum(max(0.0, proc_cpu(p) - self.before.get(p, 0.0)) for p in pids)
            for name, pids in groups.items()
        }


def cpu_line(used: dict[str, float], total: int) -> str:
    parts = [f"{name} {sec / total * 1e6:,.0f} us" for name, sec in used.items()]
    return f"CPU per activity: {', '.join(parts)}; sum {sum(used.values()) / total * 1e6:,.0f} us"


def percentiles(lat: list[float]) -> str:
    if len(lat) < 2:
        return "dispatch latency: too few samples"
    q = statistics.quantiles(sorted(lat), n=100)
    return (
        f"dispatch latency over {len(lat)} tasks: p50 {q[49] * 1000:.2f} ms, "
        f"p90 {q[89] * 1000:.2f} ms, p99 {q[98] * 1000:.2f} ms"
    )


# --- worker processes ---------------------------------------------------------------


async def serve(url: str, out: str) -> None:
    prof_dir = os.environ.get("PYWEFT_BENCH_PROFILE")
    prof = cProfile.Profile() if prof_dir else None
    w = Worker(url, activities=[noop], queues=["bench"], concurrency=64, poll_interval=0.5)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    import signal

    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with w:
        if prof is not None:
            prof.enable()
        await stop.wait()
        if prof is not None:
            prof.disable()
        lat = list(w.dispatch_latencies)
    if prof is not None and prof_dir:
        prof.dump_stats(os.path.join(prof_dir, f"worker-{os.getpid()}.prof"))
    report = {"lat": lat, "done": w.completed, "rejected": w.rejected, "trips": dict(TRIPS)}
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


def uptime() -> str:
    with open("/proc/loadavg") as f:
        return "load average " + ", ".join(f.read().split()[:3])


async def latency(kind: str, n: int) -> None:
    print(f"[{time.strftime('%H:%M:%S')} UTC, {uptime()}]")
    with tempfile.TemporaryDirectory() as tmp:
        url, schema = store_url(kind, tmp)
        try:
            async with Engine(url, workflows=[steps], serve_queues=[]) as engine:
                procs = await asyncio.to_thread(spawn_workers, url, 1, tmp)
                await (await engine.start(steps, 20, id="warm")).result(timeout=60)
                meter = CpuMeter({"engine": [os.getpid()], "worker": [procs[0][0].pid]}, schema)
                meter.start()
                t0 = time.perf_counter()
                await (await engine.start(steps, n, id="lat")).result(timeout=600)
                elapsed = time.perf_counter() - t0
                meter.stop()
                stats = await asyncio.to_thread(stop_workers, procs)
            print(
                f"{kind}: {percentiles(stats[0]['lat'][20:])}; "
                f"round trip per activity {elapsed / n * 1000:.2f} ms; {cpu_line(meter.used, n)}"
            )
        finally:
            drop(schema)
    print(f"[{time.strftime('%H:%M:%S')} UTC, {uptime()}]")


async def throughput(kind: str, runs: int, n: int, workers: int) -> None:
    print(f"[{time.strftime('%H:%M:%S')} UTC, {uptime()}]")
    prof_dir = os.environ.get("PYWEFT_BENCH_PROFILE")
    with tempfile.TemporaryDirectory() as tmp:
        url, schema = store_url(kind, tmp)
        try:
            async with Engine(url, workflows=[steps], serve_queues=[]) as engine:
                procs = await asyncio.to_thread(spawn_workers, url, workers, tmp)
                await (await engine.start(steps, 5, id="warm")).result(timeout=60)
                meter = CpuMeter(
                    {"engine": [os.getpid()], "workers": [p.pid for p, _ in procs]}, schema
                )
                prof = cProfile.Profile() if prof_dir else None
                meter.start()
                trips0 = dict(TRIPS)
                if prof is not None:
                    prof.enable()
                t0 = time.perf_counter()
                handles = [await engine.start(steps, n, id=f"r{i}") for i in range(runs)]
                await asyncio.gather(*(h.result(timeout=600) for h in handles))
                elapsed = time.perf_counter() - t0
                if prof is not None and prof_dir:
                    prof.disable()
                    prof.dump_stats(os.path.join(prof_dir, "engine.prof"))
                meter.stop()
                engine_trips = {k: v - trips0[k] for k, v in TRIPS.items()}
                stats = await asyncio.to_thread(stop_workers, procs)
            total = runs * n
            trips = (
                f"engine {trips_line([engine_trips], total)}, "
                f"workers {trips_line([s['trips'] for s in stats], total)} (their life)"
            )
            lat = [x for s in stats for x in s["lat"][5:]]
            print(
                f"{kind}: {runs} runs x {n} no-op activities via {workers} worker processes: "
                f"{total / elapsed:,.0f} activities/s ({elapsed:.2f}s); "
                f"{cpu_line(meter.used, total)}; {percentiles(lat)} (under load); {trips}; "
                f"per worker done: {[s['done'] for s in stats]}, "
                f"late results refused: {sum(s['rejected'] for s in stats)}"
            )
        finally:
            drop(schema)
    print(f"[{time.strftime('%H:%M:%S')} UTC, {uptime()}]")


def dbos(args: list[str]) -> None:
    """Run ``dbos_queues.py`` in its own virtualenv with DBOS Transact 3.4 (made once)."""
    python = DBOS_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(DBOS_VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "dbos==3.4.*"],
            check=True,
        )
    script = Path(__file__).with_name("dbos_queues.py")
    raise SystemExit(subprocess.run([str(python), str(script), *args]).returncode)


def main() -> None:
    mode = sys.argv[1]
    count_trips()
    if mode == "_worker":
        asyncio.run(serve(sys.argv[2], sys.argv[3]))
    elif mode == "dbos":
        dbos(sys.argv[2:])
    elif mode == "latency":
        asyncio.run(latency(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 500))
    else:
        args = [int(a) for a in sys.argv[3:]] + [200, 10, 2][len(sys.argv) - 3 :]
        asyncio.run(throughput(sys.argv[2], *args[:3]))


if __name__ == "__main__":
    main()
