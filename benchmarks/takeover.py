"""Takeover at scale on PostgreSQL (issue 11 §5): SIGKILL an engine owning many parked runs.

    .venv/bin/python benchmarks/takeover.py [--url postgresql://...] [--victim-runs 10000]
        [--survivor-runs 2000] [--ttl 4] [--renew 1] [--sample 200] [--trials 1]

Three ``workflow-lease`` engines, each in its own process, on one fresh schema: the
victim parks ``--victim-runs`` runs on ``wait_for_signal``, each survivor parks
``--survivor-runs``. Once every run is parked, the victim is SIGKILLed and, at the
same instant, a client sends the signal to ``--sample`` of the victim's runs.

Reported, from the kill:

* **owned**: when every one of the victim's runs has a live claim of a survivor
  (the store's holder records, scanned every 50 ms);
* **answered**: when the last signalled run completed (a survivor took it over,
  replayed it and consumed the buffered signal);
* **healthy runs that changed hands**: survivors' runs whose claim epoch or holder
  changed between just before the kill and the end (must be 0);

against the bound ``claim_ttl + 2 x claim_renew_interval + 2 s``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg
from psycopg import sql

from pyweft import Engine, WorkflowContext, workflow
from pyweft.engine.ownership.claims import decode_holder
from pyweft.engine.replay.recovery import ids_with_status
from pyweft.storage import PostgresStorage

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@workflow(name="parked_for_takeover")
async def parked_for_takeover(ctx: WorkflowContext) -> Any:
    return await ctx.wait_for_signal("go")


# --- worker -----------------------------------------------------------------------------


async def worker(cfg: dict[str, Any]) -> None:
    control = Path(cfg["control"])
    name = cfg["name"]
    async with Engine(
        cfg["url"],
        workflows=[parked_for_takeover],
        ownership="workflow-lease",
        engine_id=f"bench-{name}",
        claim_ttl=cfg["ttl"],
        claim_renew_interval=cfg["renew"],
        poll_interval=0.2,
    ) as engine:
        if cfg.get("trace"):
            _trace(engine)
        (control / f"ready-{name}").write_text(str(os.getpid()))
        ids = [f"{name}-{i:05d}" for i in range(cfg["runs"])]
        for i in range(0, len(ids), 500):
            await asyncio.gather(
                *(engine.start(parked_for_takeover, id=rid) for rid in ids[i : i + 500])
            )
        core = engine._core  # measuring only: wait until every run sits in its wait
        while any(not r.idle for r in core.runs.values()):
            await asyncio.sleep(0.05)
        (control / f"parked-{name}").write_text("")
        while not (control / "stop").exists():
            await asyncio.sleep(0.05)


def _trace(engine: Engine) -> None:
    """``--verbose``: print how long each renewal pass and reclaim scan took."""
    claims, core = engine._core.claims, engine._core
    assert claims is not None
    renew_all, reclaim = claims._renew_all, core.reclaim

    async def timed_renew() -> None:
        t0, n = time.perf_counter(), len(claims.claims)
        await renew_all()
        print(f"{time.time():.3f} renew pass: {n} claims in {time.perf_counter() - t0:.3f}s")

    async def timed_reclaim() -> int:
        t0 = time.perf_counter()
        taken = await reclaim()
        print(f"{time.time():.3f} reclaim: took {taken} in {time.perf_counter() - t0:.3f}s")
        return taken

    claims._renew_all = timed_renew  # type: ignore[method-assign]
    core.reclaim = timed_reclaim  # type: ignore[method-assign]


def spawn(cfg: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, __file__, "--worker", json.dumps(cfg)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
        )


async def wait_files(control: Path, prefix: str, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all((control / f"{prefix}-{n}").exists() for n in names):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {prefix} from {names} after {timeout}s (logs in {control})")
        await asyncio.sleep(0.05)


# --- controller -------------------------------------------------------------------------


async def holders(storage: PostgresStorage) -> dict[str, tuple[str, int, int]]:
    """Run id -> (engine id, epoch, expires_at_ms) of every holder record."""
    out = {}
    for key, raw in await storage.scan("own:h:"):
        h = decode_holder(raw)
        if h is not None and h.owner is not None:
            out[key[len("own:h:") :]] = (h.owner.engine_id, h.epoch, h.expires_at_ms)
    return out


async def trial(base: str, args: argparse.Namespace) -> dict[str, float]:
    schema = f"pyweft_bench_takeover_{uuid.uuid4().hex[:8]}"
    url = f"{base}{'&' if '?' in base else '?'}{urlencode({'schema': schema})}"
    control = Path(tempfile.mkdtemp(prefix="pyweft-takeover-"))
    names = ["victim", "s1", "s2"]
    runs = {"victim": args.victim_runs, "s1": args.survivor_runs, "s2": args.survivor_runs}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    storage = PostgresStorage(base, schema=schema)
    try:
        for name in names:
            cfg = {
                "name": name,
                "url": url,
                "control": str(control),
                "runs": runs[name],
                "ttl": args.ttl,
                "renew": args.renew,
                "trace": args.verbose,
            }
            procs[name] = spawn(cfg, control / f"{name}.log")
        t0 = time.monotonic()
        await wait_files(control, "parked", names, 900)
        print(f"   {sum(runs.values()):,} runs parked in {time.monotonic() - t0:.1f}s")
        await asyncio.sleep(2 * args.renew)  # a few renewal passes: steady state
        before = await holders(storage)
        healthy = {k: v[:2] for k, v in before.items() if not k.startswith("victim-")}
        victim_ids = [f"victim-{i:05d}" for i in range(args.victim_runs)]
        sample = random.Random(7).sample(victim_ids, min(args.sample, len(victim_ids)))
        async with Engine(url, role="client") as client:
            killed = time.monotonic()
            procs["victim"].send_signal(signal.SIGKILL)
            await asyncio.gather(*(client.signal(rid, "go", 1) for rid in sample))
            signalled = time.monotonic() - killed
            owned_at: float | None = None
            answered_at: float | None = None
            pending = set(sample)
            deadline = killed + 6 * (args.ttl + 2 * args.renew + 2)
            while (owned_at is None or pending) and time.monotonic() < deadline:
                now_ms = time.time() * 1000
                held = await holders(storage)
                completed = set(await ids_with_status(storage, "completed"))
                if owned_at is None:
                    live = sum(
                        1
                        for rid in victim_ids
                        if rid in completed  # signalled, taken over and finished
                        or (
                            (h := held.get(rid)) is not None
                            and h[0] != "bench-victim"
                            and h[2] > now_ms
                        )
                    )
                    if args.verbose:
                        print(f"      {time.monotonic() - killed:6.2f}s owned {live}")
                    if live >= len(victim_ids):
                        owned_at = time.monotonic() - killed
                pending -= completed
                if not pending and answered_at is None:
                    answered_at = time.monotonic() - killed
                await asyncio.sleep(0.1)
        after = await holders(storage)
        moved = sum(1 for k, v in healthy.items() if k in after and after[k][:2] != v)
        gone = sum(1 for k in healthy if k not in after)
        return {
            "owned": owned_at if owned_at is not None else float("nan"),
            "answered": answered_at if answered_at is not None else float("nan"),
            "signalled": signalled,
            "moved": float(moved),
            "gone": float(gone),
        }
    finally:
        (control / "stop").touch()
        for p in procs.values():
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        await storage.close()
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("PYWEFT_TEST_POSTGRES_URL", DEFAULT_URL))
    parser.add_argument("--victim-runs", type=int, default=10_000)
    parser.add_argument("--survivor-runs", type=int, default=2_000)
    parser.add_argument("--ttl", type=float, default=4.0)
    parser.add_argument("--renew", type=float, default=1.0)
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--verbose", action="store_true", help="print progress after the kill")
    args = parser.parse_args()
    bound = args.ttl + 2 * args.renew + 2
    print(
        f"takeover: SIGKILL the engine owning {args.victim_runs:,} parked runs (2 survivors "
        f"with {args.survivor_runs:,} each), claim_ttl {args.ttl:g}s, renew {args.renew:g}s; "
        f"bound ttl + 2 x renew + 2 s = {bound:g}s; {os.cpu_count()} CPUs"
    )
    for n in range(args.trials):
        r = await trial(args.url, args)
        print(
            f"   trial {n + 1}: all owned again {r['owned']:.2f}s, {args.sample} signalled "
            f"runs answered {r['answered']:.2f}s (signals sent in {r['signalled']:.2f}s); "
            f"healthy runs that changed hands {r['moved']:.0f} (claims gone {r['gone']:.0f}); "
            f"{'within' if max(r['owned'], r['answered']) <= bound else 'OVER'} the bound"
        )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        asyncio.run(worker(json.loads(sys.argv[2])))
    else:
        asyncio.run(main())
