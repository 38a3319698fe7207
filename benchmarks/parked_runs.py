"""What runs parked on ``wait_for_signal`` cost while they wait (issue 9 §7, issue 11).

    .venv/bin/python benchmarks/parked_runs.py sqlite [--runs 100000] [--idle-s 30]
    .venv/bin/python benchmarks/parked_runs.py postgres [--runs 100000] [--url ...]
        [--ownership none|lease|workflow-lease]
    .venv/bin/python benchmarks/parked_runs.py pg-idle [--runs 1000 5000] [--engines 3]

``sqlite`` / ``postgres``: one engine parks ``--runs`` runs and shuts down; a fresh
process then opens an engine over them and reports the time until the engine is
ready to serve (and until the cache is warm), its idle CPU over ``--idle-s``
seconds, its RSS, and how fast signalling every run drains them.

``pg-idle``: ``--engines`` engines (``ownership="workflow-lease"``, separate
processes) on a database of their own each park their share of ``--runs`` runs;
then the database's committed transactions per second and each engine's CPU
are measured over ``--idle-s`` seconds with nothing happening.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from pyweft import Engine, WorkflowContext, workflow

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
drained = 0
SENDERS = 512  # signals in flight at once while draining


@workflow(name="parked_on_signal")
async def parked_on_signal(ctx: WorkflowContext) -> Any:
    global drained
    value = await ctx.wait_for_signal("go")
    drained += 1  # measuring only: counts runs that got their signal in this process
    return value


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def park(url: str, n: int, prefix: str = "p", **kw: Any) -> float:
    """Start ``n`` runs that wait for a signal; returns runs/s."""
    async with Engine(url, workflows=[parked_on_signal], **kw) as engine:
        t0 = time.perf_counter()
        chunk = 500
        for i in range(0, n, chunk):
            await asyncio.gather(
                *(
                    engine.start(parked_on_signal, id=f"{prefix}{j}")
                    for j in range(i, min(n, i + chunk))
                )
            )
        rate = n / (time.perf_counter() - t0)
        core = engine._core
        while sum(1 for r in core.runs.values() if not r.idle) > 0:
            await asyncio.sleep(0.05)  # every run reached its wait
    return rate


async def measure(url: str, n: int, idle_s: float, **kw: Any) -> dict[str, Any]:
    """In a fresh process: open over ``n`` parked runs, idle, then drain them."""
    out: dict[str, Any] = {"rss_before_open_mb": rss_mb()}
    t0 = time.perf_counter()
    engine = Engine(url, workflows=[parked_on_signal], **kw)
    await engine.open()
    out["open_s"] = time.perf_counter() - t0
    core = engine._core
    while core.residency._tasks or core.loading:
        await asyncio.sleep(0.01)
    out["warm_s"] = time.perf_counter() - t0
    out["in_memory"], out["evicted"] = len(core.runs), len(core.residency)
    await asyncio.sleep(1.0)
    c0, w0 = cpu_s(), time.perf_counter()
    await asyncio.sleep(idle_s)
    out["idle_cpu_pct"] = (cpu_s() - c0) / (time.perf_counter() - w0) * 100
    out["rss_mb"] = rss_mb()
    t1 = time.perf_counter()
    # A fleet of SENDERS concurrent clients, each signalling its share one after another
    # (as a fleet of request handlers would), rather than n tasks queued on a semaphore,
    # whose wake-ups would cost the process more than the engine's own work.
    todo = iter(range(n))

    async def sender() -> None:
        for i in todo:
            await engine.signal(f"p{i}", "go", i)

    await asyncio.gather(*(sender() for _ in range(SENDERS)))
    out["sent_s"] = time.perf_counter() - t1
    while drained < n:
        await asyncio.sleep(0.01)
    out["drain_s"] = time.perf_counter() - t1
    out["drain_runs_per_s"] = n / out["drain_s"]
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    await engine.shutdown()
    return out


def child(args: list[str]) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True
    )
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = "&".join(filter(None, [parts.query, urlencode(params)]))
    return urlunsplit(parts._replace(query=query))


def report(store: str, n: int, setup: float, m: dict[str, Any]) -> None:
    print(f"{store}: {n:,} runs parked on wait_for_signal (set up at {setup:,.0f} runs/s)")
    print(f"  open, ready to serve: {m['open_s']:.2f} s  (cache warm: {m['warm_s']:.2f} s,")
    print(f"    {m['in_memory']:,} runs in memory, {m['evicted']:,} evicted)")
    print(f"  idle CPU: {m['idle_cpu_pct']:.2f}% of one core")
    print(f"  RSS: {m['rss_mb']:.0f} MB idle (before open {m['rss_before_open_mb']:.0f} MB)")
    print(f"  signal all: {m['drain_runs_per_s']:,.0f} runs/s ({m['drain_s']:.1f} s; sends took")
    print(f"    {m['sent_s']:.1f} s); peak RSS {m['peak_rss_mb']:.0f} MB")


def bench_store(store: str, n: int, idle_s: float, base: str, ownership: str | None) -> None:
    import psycopg
    from psycopg import sql

    schema = None
    if store == "sqlite":
        url = f"sqlite:///{Path(tempfile.mkdtemp(prefix='pyweft-parked-')) / 'parked.db'}"
    else:
        schema = f"pyweft_bench_parked_{uuid.uuid4().hex[:8]}"
        url = with_query(base, schema=schema)
    try:
        kw = {} if ownership is None else {"ownership": ownership}
        setup = asyncio.run(park(url, n, **kw))
        m = child(["--measure", url, str(n), str(idle_s), *([ownership] if ownership else [])])
        report(f"{store} (ownership={ownership or 'default'})", n, setup, m)
    finally:
        if schema is not None:
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


# --- idle transactions on PostgreSQL, several engines ----------------------------------


async def pg_engine(url: str, prefix: str, n: int) -> None:
    async with Engine(
        url, workflows=[parked_on_signal], ownership="workflow-lease", recover=True
    ) as engine:
        for i in range(0, n, 500):
            await asyncio.gather(
                *(
                    engine.start(parked_on_signal, id=f"{prefix}{j}")
                    for j in range(i, min(n, i + 500))
                )
            )
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


def snapshot(url: str, procs: list[subprocess.Popen[str]]) -> tuple[int, list[float]]:
    """The database's transaction count so far, and each engine's CPU seconds."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0]), [proc_cpu_s(p.pid) for p in procs]


def pg_idle(base: str, counts: list[int], engines: int, idle_s: float) -> None:
    import psycopg
    from psycopg import sql

    print(f"pg-idle: {engines} engines, ownership='workflow-lease', idle {idle_s:.0f} s")
    for n in counts:
        db = f"pyweft_bench_idle_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
        url = urlunsplit(urlsplit(base)._replace(path=f"/{db}"))
        procs = []
        try:
            for e in range(engines):
                procs.append(
                    subprocess.Popen(
                        [sys.executable, __file__, "--pg-engine", url, f"e{e}-", str(n // engines)],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                )
            for p in procs:
                assert p.stdout is not None and p.stdout.readline().strip() == "ready"
            time.sleep(5.0)  # let the last starts settle and a renewal cycle pass

            x0, c0 = snapshot(url, procs)
            t0 = time.perf_counter()
            time.sleep(idle_s)
            x1, c1 = snapshot(url, procs)
            dt = time.perf_counter() - t0
            cpus = ", ".join(f"{(b - a) / dt * 100:.1f}%" for a, b in zip(c0, c1, strict=True))
            # Each snapshot is itself one transaction (and its connection's setup).
            tps = (x1 - x0 - 1) / dt
            print(f"  {n:,} parked runs: {tps:,.1f} transactions/s; CPU per engine {cpus}")
        finally:
            for p in procs:
                if p.stdin is not None:
                    p.stdin.close()
            for p in procs:
                p.wait(timeout=60)
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(db)))


def main() -> None:
    if sys.argv[1:2] == ["--measure"]:
        url, n, idle_s = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
        kw = {"ownership": sys.argv[5]} if len(sys.argv) > 5 else {}
        print(json.dumps(asyncio.run(measure(url, n, idle_s, **kw))))
        return
    if sys.argv[1:2] == ["--pg-engine"]:
        asyncio.run(pg_engine(sys.argv[2], sys.argv[3], int(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenario", choices=["sqlite", "postgres", "pg-idle"])
    parser.add_argument("--runs", type=int, nargs="+", default=None)
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--engines", type=int, default=3)
    parser.add_argument("--url", default=os.environ.get("PYWEFT_TEST_POSTGRES_URL", DEFAULT_URL))
    parser.add_argument(
        "--ownership",
        choices=["none", "lease", "workflow-lease"],
        default=None,
        help="Engine(ownership=...) for sqlite/postgres; default: the store's default",
    )
    args = parser.parse_args()
    if args.scenario == "pg-idle":
        pg_idle(args.url, args.runs or [1000, 5000], args.engines, args.idle_s)
    else:
        runs = (args.runs or [100_000])[0]
        bench_store(args.scenario, runs, args.idle_s, args.url, args.ownership)


if __name__ == "__main__":
    main()
