"""A lock held by a SIGKILLed engine is reclaimed after its lease (real processes, PG).

The worker process's run ``a`` takes the lock (lease 3 s) and waits; the worker is
SIGKILLed. An engine in this process, which does not register ``a``'s workflow (so
nothing resumes ``a`` and renews its lease), starts run ``b`` of another workflow on
the same lock: ``b`` queues and gets the lock once ``a``'s lease ran out. (An engine
that does register it would take ``a`` over and, its lease still running, keep the
lock for it: the run is alive again, see tests/integration/test_locks.py.)
Skips without a server; fails in CI (``PYWEFT_REQUIRE_POSTGRES=1``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pyweft import Engine, WorkflowContext, workflow
from support.backends import postgres_schema, with_schema
from support.poll import eventually

WORKER = Path(__file__).with_name("lock_worker.py")
LEDGER: list[Path] = []


def note(line: str) -> None:
    with open(LEDGER[0], "a") as f:
        f.write(line + "\n")


@workflow(name="guarded_b")
async def guarded(ctx: WorkflowContext, who: str) -> str:
    async with ctx.lock("printer", lease="3s"):
        if not ctx.is_replaying:
            note(f"HOLDING {who} {os.getpid()}")
        await ctx.wait_for_signal("done")
    return who


def holding(ledger: Path) -> list[str]:
    if not ledger.exists():
        return []
    return [line.split()[1] for line in ledger.read_text().splitlines() if line.startswith("HOLD")]


def launch_holding_worker(store: str, ledger: Path, log: Path) -> subprocess.Popen[bytes]:
    """Start the worker and wait until its run holds the lock."""
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, str(WORKER), store, str(ledger)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while holding(ledger) != ["a"]:
        assert worker.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the worker never took the lock"
        time.sleep(0.05)
    return worker


def kill(worker: subprocess.Popen[bytes]) -> float:
    """SIGKILL the worker (if alive); when it died."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGKILL)
    worker.wait()
    return time.monotonic()


async def test_a_lock_held_by_a_killed_engine_is_reclaimed_after_its_lease(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.txt"
    LEDGER[:] = [ledger]
    with postgres_schema() as (url, schema):
        store = with_schema(url, schema)
        worker = launch_holding_worker(store, ledger, tmp_path / "worker.log")
        try:
            killed_at = kill(worker)
            async with Engine(
                store, workflows=[guarded], claim_ttl=2.0, claim_renew_interval=0.5
            ) as engine:
                await engine.start(guarded, "b", id="b")
                await eventually(lambda: holding(ledger) == ["a", "b"], timeout=30,
                                 what="b reclaims the lock")  # fmt: skip
                assert time.monotonic() - killed_at >= 2.5  # not before a's lease ran out
                held = await engine.inspect_lock("printer")
                assert [h["workflow_id"] for h in held["holders"]] == ["b"]
                assert held["waiters"] == []
                await engine.signal("b", "done")
                assert await engine.get_handle("b").result(timeout=10) == "b"
                assert (await engine.inspect_lock("printer"))["holders"] == []
        finally:
            kill(worker)
