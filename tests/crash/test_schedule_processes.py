"""Three engine processes on one PostgreSQL store fire each schedule occurrence once.

Each process declares the same every-second schedule in code (so all three race to
create it at open) and fires it on the real clock. One of them is SIGKILLed half
way. Afterwards every occurrence between the first and the last one fired has
exactly one run in the store, with the right provenance, and every run's activity
executed once. Skips without a server; fails in CI (``PYWEFT_REQUIRE_POSTGRES=1``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from pyweft import Engine
from pyweft.storage import PostgresStorage
from support.backends import postgres_schema, with_schema

WORKER = Path(__file__).with_name("schedule_worker.py")


def _lines(ledger: Path) -> list[list[str]]:
    if not ledger.exists():
        return []
    return [line.split() for line in ledger.read_text().splitlines() if line.strip()]


def _wait_for(ledger: Path, kind: str, count: int, procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 60
    while sum(1 for line in _lines(ledger) if line[0] == kind) < count:
        for p in procs:
            if p.poll() not in (None, 0):
                raise AssertionError(f"a worker exited with {p.returncode}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {count} {kind} lines")
        time.sleep(0.05)


async def _runs(url: str, schema: str) -> list[tuple[str, str, float | None, str | None]]:
    storage = PostgresStorage(url, schema=schema)
    try:
        async with Engine(storage, role="client") as engine:
            out = []
            cursor = None
            while True:
                page = await engine.list(schedule_id="beat", limit=500, cursor=cursor)
                for r in page.items:
                    nominal = None if r.schedule is None else r.schedule.nominal_time.timestamp()
                    out.append((r.id, r.status, nominal, None if r.schedule is None else "beat"))
                if page.next_cursor is None:
                    return out
                cursor = page.next_cursor
    finally:
        await storage.close()


def test_three_engines_fire_every_occurrence_exactly_once(tmp_path: Path) -> None:
    with postgres_schema() as (url, schema):
        store = with_schema(url, schema)
        ledger = tmp_path / "ledger.txt"
        logs = []
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for name, seconds in (("a", 12), ("b", 12), ("c", 60)):
                log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115 - closed below
                logs.append(log)
                procs.append(
                    subprocess.Popen(
                        [sys.executable, str(WORKER), store, str(ledger), name, str(seconds)],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env=dict(os.environ),
                    )
                )
            _wait_for(ledger, "READY", 3, procs)
            time.sleep(4)  # real time on purpose: the engines fire on the system clock
            procs[2].send_signal(signal.SIGKILL)  # c dies holding claims; a and b go on
            procs[2].wait()
            for p in procs[:2]:
                assert p.wait(timeout=60) == 0
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for log in logs:
                log.close()
        runs = asyncio.run(_runs(url, schema))
        did = [line for line in _lines(ledger) if line[0] == "DID"]
    ids = [r[0] for r in runs]
    assert len(ids) == len(set(ids))
    nominals = sorted(r[2] for r in runs if r[2] is not None)
    assert len(nominals) == len(runs) >= 6, runs
    # one run per occurrence, and no occurrence in between was left out
    assert len(set(nominals)) == len(nominals)
    assert nominals == [nominals[0] + i for i in range(len(nominals))], nominals
    # every completed run executed its activity once (a killed engine's run may be
    # re-driven, but never produces a second committed execution for a completed run)
    executions = Counter(line[2] for line in did)
    completed = [r[0] for r in runs if r[1] == "completed"]
    assert len(completed) >= len(runs) - 3  # the last ones may still be in flight at stop
    assert all(executions[run_id] >= 1 for run_id in completed)
    doubled = {k: v for k, v in executions.items() if v > 1}
    killed_runs = {line[2] for line in did if line[1] == "c"}
    assert set(doubled) <= killed_runs, doubled  # only a run c was executing when killed
    assert {line[1] for line in did} >= {"a", "b"}
