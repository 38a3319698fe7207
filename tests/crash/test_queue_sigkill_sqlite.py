"""A SIGKILLed engine on SQLite: its runs keep their queue slots until a restarted
engine recovers and finishes them, so the queue never runs more than its limit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import queue_sqlite_worker as worker

from pyweft import Engine

RUNS = 5


async def _enqueue(db: str) -> None:
    async with Engine(
        db, workflows=[worker.held_job], queues=[worker.QUEUE], role="client"
    ) as engine:  # a client stores runs and starts none
        for i in range(RUNS):
            await engine.enqueue(worker.QUEUE, worker.held_job, f"r{i}", id=f"r{i}")


def _begun(ledger: Path, pid: int | None = None) -> list[str]:
    text = ledger.read_text() if ledger.exists() else ""
    return [
        line.split()[1]
        for line in text.splitlines()
        if line.startswith("B ") and (pid is None or line.split()[2] == str(pid))
    ]


async def _after_kill(db: str) -> tuple[int, int]:
    # Without recovery the dead engine's runs are not resumed: their slots stay taken,
    # and this engine's dispatcher (same queue) must not start anything.
    async with Engine(
        db, workflows=[worker.held_job], activities=[worker.hold], queues=[worker.QUEUE],
        recover=False,
    ) as engine:  # fmt: skip
        await asyncio.sleep(0.2)  # room for a (wrong) dispatch to happen
        info = await engine.queue_info("held")
        return info.depth, info.in_flight


async def _recover(db: str) -> tuple[dict[str, int], int, int]:
    async with Engine(
        db, workflows=[worker.held_job], activities=[worker.hold], queues=[worker.QUEUE]
    ) as engine:
        for i in range(RUNS):
            assert await engine.get_handle(f"r{i}").result(timeout=30) == f"r{i}"
        info = await engine.queue_info("held")
        counts = {g.key: g.count for g in await engine.aggregate(group_by="status")}
        return counts, info.depth, info.in_flight


def test_a_killed_engines_slots_hold_until_its_runs_are_recovered(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'q.db'}"
    ledger, release = tmp_path / "ledger", tmp_path / "release"
    worker.configure(ledger, release)
    asyncio.run(_enqueue(db))
    proc = subprocess.Popen(
        [sys.executable, worker.__file__, str(tmp_path / "q.db"), str(ledger), str(release)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while len(_begun(ledger, proc.pid)) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "worker did not start"
            time.sleep(0.01)
        time.sleep(0.1)  # a third start, if the limit were broken, would show by now
        assert len(_begun(ledger)) == 2
    finally:
        proc.kill()
        proc.wait()
    assert asyncio.run(_after_kill(db)) == (RUNS - 2, 2)
    assert len(_begun(ledger)) == 2
    release.touch()
    counts, depth, in_flight = asyncio.run(_recover(db))
    assert counts == {"completed": RUNS}
    assert (depth, in_flight) == (0, 0)
    assert worker.most_inside <= 2, ledger.read_text()
    begun = _begun(ledger)
    assert sorted(set(begun)) == [f"r{i}" for i in range(RUNS)]
    assert len(begun) == RUNS + 2  # the two killed mid-activity ran again, once each
