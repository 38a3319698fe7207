"""DBOS Transact 3.4 queues, the same shapes as ``workers.py``, for a side-by-side figure.

Run through ``benchmarks/workers.py dbos ...``, which makes a virtualenv of its own
under ``build/`` with ``dbos==3.4.*`` (never a dependency of pyweft):

    .venv/bin/python benchmarks/workers.py dbos latency [N] [--poll S]
    .venv/bin/python benchmarks/workers.py dbos throughput [RUNS] [STEPS] [WORKERS] [--poll S]

The pyweft shape maps onto DBOS as follows: a parent workflow in the "engine"
process (which listens to no queue) enqueues each no-op "activity" as a child
workflow on queue ``bench`` and waits for its result, STEPS times in sequence;
WORKERS other processes listen to ``bench`` and run the children. Dispatch latency
is a child's ``started_at_epoch_ms`` minus its ``created_at`` in DBOS's own
``workflow_status`` table (the same machine clock). ``--poll`` is the queue's
``polling_interval_sec`` and the parents' result polling interval (DBOS's default is
1 s for both: workers find new work, and a waiting workflow its child's result, by
polling the database).
CPU per activity is read from ``/proc`` for the engine, the workers and the
PostgreSQL backends of this benchmark's connections, over the timed part only.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid

import psycopg
from dbos import DBOS, DBOSConfig

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
_TICK = os.sysconf("SC_CLK_TCK")


@DBOS.workflow()
async def noop(x: int) -> int:
    return x


@DBOS.workflow()
async def steps(n: int, poll: float) -> int:
    queue = await DBOS.retrieve_queue_async("bench")
    assert queue is not None
    for i in range(n):
        handle = await queue.enqueue_async(noop, i)
        await handle.get_result(polling_interval_sec=poll)  # DBOS polls for the result
    return n


def configure(db: str, app: str, executor: str) -> None:
    url = f"postgresql://postgres@127.0.0.1:5432/{db}?application_name={app}"
    config: DBOSConfig = {
        "name": "pyweft-bench",
        "system_database_url": url,
        "executor_id": executor,
        "log_level": "WARNING",
    }
    DBOS(config=config)


async def serve(db: str, app: str, poll: float, executor: str) -> None:
    configure(db, app, executor)
    DBOS.listen_queues(["bench"])
    DBOS.launch()
    await DBOS.register_queue_async("bench", polling_interval_sec=poll)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    DBOS.destroy(workflow_completion_timeout_sec=0)


def spawn(db: str, app: str, poll: float, workers: int) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen([sys.executable, __file__, "_worker", db, app, str(poll), f"w{i}"])
        for i in range(workers)
    ]


def proc_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def backends(app: str) -> list[int]:
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (app,)
        ).fetchall()
    return [r[0] for r in rows]


def load() -> str:
    with open("/proc/loadavg") as f:
        return "load average " + ", ".join(f.read().split()[:3])


async def measure(mode: str, runs: int, n: int, workers: int, poll: float) -> None:
    print(f"[{time.strftime('%H:%M:%S')} UTC, {load()}]")
    db = f"dbos_bench_{uuid.uuid4().hex[:8]}"
    app = db
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        configure(db, app, "engine")
        DBOS.listen_queues([])  # the engine only orchestrates, as serve_queues=[] does
        DBOS.launch()
        await DBOS.register_queue_async("bench", polling_interval_sec=poll)
        procs += await asyncio.to_thread(spawn, db, app, poll, workers)
        await asyncio.sleep(4.0)  # imports and launch
        await (await DBOS.start_workflow_async(steps, 3, poll)).get_result()  # warm
        pids = {"engine": [os.getpid()], "workers": [p.pid for p in procs]}
        before = {p: proc_cpu(p) for p in [*pids["engine"], *pids["workers"], *backends(app)]}
        t0 = time.perf_counter()
        t0_ms = time.time() * 1000
        handles = [await DBOS.start_workflow_async(steps, n, poll) for _ in range(runs)]
        await asyncio.gather(*(h.get_result(polling_interval_sec=poll) for h in handles))
        elapsed = time.perf_counter() - t0
        pids["postgres"] = backends(app)
        used = {
            name: sum(max(0.0, proc_cpu(p) - before.get(p, 0.0)) for p in ps)
            for name, ps in pids.items()
        }
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{db}") as conn:
            rows = conn.execute(
                "SELECT started_at_epoch_ms - created_at FROM dbos.workflow_status "
                "WHERE queue_name = 'bench' AND created_at >= %s AND started_at_epoch_ms "
                "IS NOT NULL",
                (t0_ms,),
            ).fetchall()
        lat = sorted(float(r[0]) for r in rows)
        total = runs * n
        q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [0.0] * 99
        cpu = ", ".join(f"{k} {v / total * 1e6:,.0f} us" for k, v in used.items())
        print(
            f"DBOS {_version()} queues ({mode}, polling_interval_sec={poll:g}): {runs} runs x "
            f"{n} no-op child workflows via {workers} worker processes: "
            f"{total / elapsed:,.0f} activities/s ({elapsed:.2f}s), round trip per activity "
            f"{elapsed / n * 1000:.2f} ms; CPU per activity: {cpu}; sum "
            f"{sum(used.values()) / total * 1e6:,.0f} us; dispatch latency over {len(lat)} "
            f"children: p50 {q[49]:.2f} ms, p90 {q[89]:.2f} ms, p99 {q[98]:.2f} ms"
        )
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        DBOS.destroy(workflow_completion_timeout_sec=0)
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    print(f"[{time.strftime('%H:%M:%S')} UTC, {load()}]")


def _version() -> str:
    from importlib.metadata import version

    return version("dbos")


def main() -> None:
    args = sys.argv[1:]
    if args[0] == "_worker":
        asyncio.run(serve(args[1], args[2], float(args[3]), args[4]))
        return
    poll = 1.0
    if "--poll" in args:
        i = args.index("--poll")
        poll = float(args[i + 1])
        del args[i : i + 2]
    mode, nums = args[0], [int(a) for a in args[1:]]
    if mode == "latency":
        asyncio.run(measure(mode, 1, (nums or [500])[0], 1, poll))
    else:
        runs, n, workers = (nums + [200, 10, 2][len(nums) :])[:3]
        asyncio.run(measure(mode, runs, n, workers, poll))


if __name__ == "__main__":
    main()
