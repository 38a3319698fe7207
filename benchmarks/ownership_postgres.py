"""What ownership costs and what it buys, on PostgreSQL (and SQLite for the lease overhead).

    .venv/bin/python benchmarks/ownership_postgres.py [--url postgresql://...]
        [--steps 3000] [--workflows 1500] [--activities 4] [--trials 5]

Prints three things:

1. **Lease overhead**: one workflow of ``--steps`` sequential no-op activities,
   ``ownership="none"`` vs ``"lease"``, on PostgreSQL and on SQLite
   (``synchronous=FULL``), as steps/s and the difference in percent (each mode
   runs twice, alternating; the best run counts).
2. **Scale-out**: ``--workflows`` workflows of ``--activities`` no-op activities,
   started evenly by 3 ``workflow-lease`` engines in separate processes, versus
   the same load on 1 engine process (``workflow-lease``, and ``none`` for
   reference), on one PostgreSQL store: completed steps/s across all engines,
   from the moment every engine may start to the last completion.
3. **Failover**: 3 ``workflow-lease`` engines (``claim_ttl=4s``,
   ``claim_renew_interval=1s``, so the documented bound ``claim_ttl + 2 x renew``
   is ``claim_ttl + 2 s`` = 6 s) each drive 30 runs of steady 0.1 s steps; one is
   SIGKILLed; for each of its runs, the time from the kill to the first step
   committed by a survivor (each step's result carries the pid that ran it).
   ``--trials`` trials; the distribution of "all its runs resumed" is reported.

Each scenario uses a fresh schema, dropped afterwards. The server is ``--url``,
else ``$PYWEFT_TEST_POSTGRES_URL``, else ``postgresql://postgres@127.0.0.1:5432/postgres``.
Worker processes are this file run with ``--worker CONFIG_JSON``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlencode

import psycopg
from psycopg import sql

from pyweft import Engine, WorkflowContext, activity, workflow

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
FAILOVER_TTL, FAILOVER_RENEW = 4.0, 1.0
FAILOVER_RUNS_PER_ENGINE, FAILOVER_WORK_S = 30, 0.1


@activity
async def noop(i: int) -> int:
    return i


@activity
async def tick(i: int, work_s: float) -> dict[str, int]:
    await asyncio.sleep(work_s)
    return {"i": i, "pid": os.getpid()}


@workflow
async def sequential(ctx: WorkflowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.run(noop, i)
    return total


@workflow
async def few(ctx: WorkflowContext, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.run(noop, i)
    return total


@workflow
async def steady(ctx: WorkflowContext, n: int, work_s: float) -> int:
    for i in range(n):
        await ctx.run(tick, i, work_s)
    return n


# --- schemas ----------------------------------------------------------------------------

schemas: list[str] = []


def fresh_schema(base: str, name: str) -> str:
    schema = f"pyweft_bench_{name}_{uuid.uuid4().hex[:8]}"
    schemas.append(schema)
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}{urlencode({'schema': schema})}"


def drop_schemas(base: str) -> None:
    with psycopg.connect(base, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    schemas.clear()


# --- 1. lease overhead ------------------------------------------------------------------


async def sequential_rate(url: str, steps: int, ownership: str) -> float:
    async with Engine(url, workflows=[sequential], ownership=ownership) as engine:
        await (await engine.start(sequential, 10)).result()  # warm-up: connections, caches
        t0 = time.perf_counter()
        await (await engine.start(sequential, steps)).result()
        return steps / (time.perf_counter() - t0)


async def bench_lease_overhead(base: str, steps: int) -> None:
    print(f"\n1. lease overhead: one workflow of {steps:,} sequential no-op activities")
    tmp = Path(tempfile.mkdtemp(prefix="pyweft-bench-"))
    for store in ("postgres", "sqlite FULL"):
        best: dict[str, float] = {"none": 0.0, "lease": 0.0}
        for trial in range(2):
            for mode in ("none", "lease"):
                if store == "postgres":
                    url = fresh_schema(base, "lease")
                else:
                    url = f"sqlite:///{tmp / f'{mode}-{trial}.db'}"
                best[mode] = max(best[mode], await sequential_rate(url, steps, mode))
        if store == "postgres":
            drop_schemas(base)
        diff = (best["lease"] - best["none"]) / best["none"] * 100
        print(
            f"   {store:12s} none {best['none']:7,.0f} steps/s   lease {best['lease']:7,.0f} "
            f"steps/s   ({diff:+.1f}%)"
        )


# --- worker processes -------------------------------------------------------------------


def spawn(config: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, __file__, "--worker", json.dumps(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


async def worker(cfg: dict[str, Any]) -> None:
    """One engine: open, say READY, wait for GO, start its share, report, serve until STOP."""
    control = Path(cfg["control"])
    name = cfg["name"]
    kw: dict[str, Any] = {"ownership": cfg["ownership"], "poll_interval": 0.1}
    if cfg["ownership"] == "workflow-lease":
        kw |= {"claim_ttl": cfg["claim_ttl"], "claim_renew_interval": cfg["claim_renew"]}
    async with Engine(cfg["url"], workflows=[few, steady], **kw) as engine:
        (control / f"ready-{name}").write_text(str(os.getpid()))
        while not (control / "go").exists():
            await asyncio.sleep(0.005)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu_at_go = usage.ru_utime + usage.ru_stime
        handles = []
        ids = cfg["ids"]
        for chunk in range(0, len(ids), 50):
            starts = []
            for rid in ids[chunk : chunk + 50]:
                if cfg["kind"] == "few":
                    starts.append(engine.start(few, cfg["activities"], id=rid))
                else:
                    starts.append(engine.start(steady, cfg["steps"], cfg["work_s"], id=rid))
            handles += await asyncio.gather(*starts)
        (control / f"started-{name}").write_text(f"{time.time():.6f}")
        if cfg["kind"] == "few":
            await asyncio.gather(*(h.result() for h in handles))
            cpu = resource.getrusage(resource.RUSAGE_SELF)
            (control / f"done-{name}").write_text(
                f"{time.time():.6f} {cpu.ru_utime + cpu.ru_stime - cpu_at_go:.6f}"
            )
        while not (control / "stop").exists():
            await asyncio.sleep(0.05)


async def wait_files(control: Path, prefix: str, names: list[str], timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        paths = [control / f"{prefix}-{n}" for n in names]
        if all(p.exists() for p in paths):
            return [p.read_text() for p in paths]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {prefix} from {names} after {timeout}s (logs in {control})")
        await asyncio.sleep(0.01)


def stop_all(control: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    (control / "stop").touch()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


# --- 2. scale-out -----------------------------------------------------------------------


async def scale_run(base: str, engines: int, ownership: str, workflows: int, acts: int) -> float:
    url = fresh_schema(base, "scale")
    control = Path(tempfile.mkdtemp(prefix="pyweft-bench-"))
    names = [f"e{k}" for k in range(engines)]
    procs = []
    try:
        for k, name in enumerate(names):
            ids = [f"w{i:05d}" for i in range(k, workflows, engines)]
            cfg = {
                "name": name,
                "url": url,
                "control": str(control),
                "ownership": ownership,
                "claim_ttl": 30.0,
                "claim_renew": 5.0,
                "kind": "few",
                "activities": acts,
                "ids": ids,
            }
            procs.append(spawn(cfg, control / f"{name}.log"))
        await wait_files(control, "ready", names, 60)
        server_before = server_cpu()
        t0 = time.time()
        (control / "go").touch()
        done = [d.split() for d in await wait_files(control, "done", names, 600)]
        elapsed = max(float(d[0]) for d in done) - t0
        server = sum(server_cpu().values()) - sum(server_before.values())
    finally:
        stop_all(control, procs)
        drop_schemas(base)
    steps = workflows * acts
    engines_cpu = sum(float(d[1]) for d in done)
    return ScaleResult(steps / elapsed, engines_cpu / elapsed, server / elapsed, steps)


class ScaleResult(NamedTuple):
    rate: float  # completed steps/s
    engine_cores: float  # CPU seconds per second, all engine processes together
    server_cores: float  # the same for every PostgreSQL process
    steps: int


def server_cpu() -> dict[int, float]:
    """CPU seconds used so far by each PostgreSQL server process on this machine."""
    tick = os.sysconf("SC_CLK_TCK")
    used = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # the process ended
        name, fields = text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()
        if name.startswith("postgres"):
            used[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / tick
    return used


async def bench_scale_out(base: str, workflows: int, acts: int) -> None:
    print(
        f"\n2. scale-out: {workflows:,} workflows x {acts} no-op activities, started evenly, "
        "completed steps/s"
    )
    rows = [(1, "none"), (1, "workflow-lease"), (3, "workflow-lease")]
    rates = {}
    for engines, mode in rows:
        runs = [await scale_run(base, engines, mode, workflows, acts) for _ in range(2)]
        best = rates[(engines, mode)] = max(runs, key=lambda r: r.rate)
        print(
            f"   {engines} engine process(es), {mode:14s} {best.rate:7,.0f} steps/s; CPU busy: "
            f"engines {best.engine_cores:.2f} cores, PostgreSQL {best.server_cores:.2f} cores; "
            f"per step: engines {best.engine_cores / best.rate * 1e6:.0f} us, "
            f"PostgreSQL {best.server_cores / best.rate * 1e6:.0f} us"
        )
    one, three = rates[(1, "workflow-lease")], rates[(3, "workflow-lease")]
    print(f"   3 engines vs 1 (workflow-lease): x{three.rate / one.rate:.2f}")
    per_step = (one.engine_cores + one.server_cores) / one.rate
    cores = os.cpu_count() or 1
    print(
        f"   CPU ceiling on {cores} cores at 1 engine's cost per step: "
        f"{cores / per_step:,.0f} steps/s = x{cores / per_step / one.rate:.2f} of 1 engine"
    )


# --- 3. failover ------------------------------------------------------------------------


async def failover_trial(base: str) -> list[float]:
    url = fresh_schema(base, "failover")
    control = Path(tempfile.mkdtemp(prefix="pyweft-bench-"))
    names = ["victim", "s1", "s2"]
    steps = 400  # far longer than the trial: every run is still going when it ends
    procs = []
    try:
        for name in names:
            ids = [f"{name}-{i:03d}" for i in range(FAILOVER_RUNS_PER_ENGINE)]
            cfg = {
                "name": name,
                "url": url,
                "control": str(control),
                "ownership": "workflow-lease",
                "claim_ttl": FAILOVER_TTL,
                "claim_renew": FAILOVER_RENEW,
                "kind": "steady",
                "steps": steps,
                "work_s": FAILOVER_WORK_S,
                "ids": ids,
            }
            procs.append(spawn(cfg, control / f"{name}.log"))
        pids = dict(zip(names, await wait_files(control, "ready", names, 60), strict=True))
        (control / "go").touch()
        await wait_files(control, "started", names, 60)
        await asyncio.sleep(1.5)  # every claim renewed at least once
        killed_at = time.time()
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        victim_pid = int(pids["victim"])
        victim_ids = [f"victim-{i:03d}" for i in range(FAILOVER_RUNS_PER_ENGINE)]
        resumed: dict[str, float] = {}
        deadline = time.monotonic() + 4 * (FAILOVER_TTL + 2 * FAILOVER_RENEW)
        async with Engine(url, recover=False) as reader:  # reads only; drives nothing
            while len(resumed) < len(victim_ids) and time.monotonic() < deadline:
                await asyncio.sleep(0.25)
                for rid in victim_ids:
                    if rid in resumed:
                        continue
                    for s in (await reader.history(rid)).steps:
                        pid = s.result.get("pid") if isinstance(s.result, dict) else None
                        if pid not in (None, victim_pid) and s.finished_at is not None:
                            resumed[rid] = s.finished_at.timestamp() - killed_at
                            break
        if len(resumed) < len(victim_ids):
            raise AssertionError(f"only {len(resumed)}/{len(victim_ids)} runs resumed")
        return sorted(resumed.values())
    finally:
        stop_all(control, procs[1:])
        drop_schemas(base)


async def bench_failover(base: str, trials: int) -> None:
    bound = FAILOVER_TTL + 2 * FAILOVER_RENEW
    print(
        f"\n3. failover: SIGKILL one of 3 workflow-lease engines ({FAILOVER_RUNS_PER_ENGINE} "
        f"runs each, claim_ttl {FAILOVER_TTL:g}s, renew {FAILOVER_RENEW:g}s; bound "
        f"claim_ttl + 2 s = {bound:g}s): kill -> first step committed by a survivor"
    )
    alls = []
    for trial in range(trials):
        delays = await failover_trial(base)
        alls.append(delays[-1])
        print(
            f"   trial {trial + 1}: first run resumed {delays[0]:.2f}s, median "
            f"{statistics.median(delays):.2f}s, all {delays[-1]:.2f}s"
        )
    print(
        f"   all runs resumed: min {min(alls):.2f}s, median {statistics.median(alls):.2f}s, "
        f"max {max(alls):.2f}s; within {bound:g}s in {sum(a <= bound for a in alls)}/{trials} "
        "trials"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("PYWEFT_TEST_POSTGRES_URL", DEFAULT_URL))
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--workflows", type=int, default=1500)
    parser.add_argument("--activities", type=int, default=4)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--only", choices=("lease", "scale", "failover"))
    args = parser.parse_args()
    print(f"PostgreSQL: {args.url}; {os.cpu_count()} CPUs")
    try:
        if args.only in (None, "lease"):
            await bench_lease_overhead(args.url, args.steps)
        if args.only in (None, "scale"):
            await bench_scale_out(args.url, args.workflows, args.activities)
        if args.only in (None, "failover"):
            await bench_failover(args.url, args.trials)
    finally:
        drop_schemas(args.url)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        asyncio.run(worker(json.loads(sys.argv[2])))
    else:
        asyncio.run(main())
