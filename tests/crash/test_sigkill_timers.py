"""A durable sleep survives SIGKILL with its original start and deadline (real SystemClock)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import pytest

from pyweft import Engine, StepInfo, WorkflowInfo
from support import crashkit as kit

N_RUNS = 6
SEED = 0  # "nap" plans do not depend on the seed
SLEEP_STEP = 2  # plan: activity, sleep(kit.NAP_S), activity


def _marks(ledger: Path, lifetime: str, phase: int) -> set[str]:
    return {
        e.run
        for e in kit.read_ledger(ledger)
        if e.kind == "MARK" and e.lifetime == lifetime and e.phase == phase
    }


async def _wait_until_all_asleep(
    db: Path, ledger: Path, worker: kit.WorkerProcess, ids: list[str], timeout: float = 20.0
) -> dict[str, StepInfo]:
    """Each run's sleep step as soon as every run's sleep is durably pending."""
    deadline = time.monotonic() + timeout

    async def tick(what: str) -> None:
        assert worker.proc.poll() is None, f"worker exited early:\n{worker.log_tail()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)

    # Open the inspecting engine only once the worker has created the store and
    # every run (so it never races the worker to write the schema marker).
    while _marks(ledger, worker.lifetime, 1) != set(ids):
        await tick("every run to pass its first step")
    async with Engine(f"sqlite:///{db}", role="client") as engine:
        while True:
            steps = {i: await engine.history(i) for i in ids}
            sleeps = {i: s[SLEEP_STEP - 1] for i, s in steps.items() if len(s) >= SLEEP_STEP}
            if len(sleeps) == len(ids) and all(s.status == "open" for s in sleeps.values()):
                return sleeps
            assert all(s.status == "open" for s in sleeps.values()), (
                f"a sleep of {kit.NAP_S}s ended before the test saw it pending: {sleeps}"
            )
            await tick("every run's sleep to be pending")


async def _read(db: Path, ids: list[str]) -> dict[str, tuple[WorkflowInfo, list[StepInfo]]]:
    async with Engine(f"sqlite:///{db}", recover=False) as engine:
        return {i: (await engine.describe(i), await engine.history(i)) for i in ids}


def test_sleep_keeps_its_original_start_and_deadline_across_two_sigkills(tmp_path: Path) -> None:
    """Kill the worker while every run sleeps, kill its successor once it re-armed the
    sleeps, then let a third finish. Asserted: every run completes with the right result;
    the sleep step's recorded ``started_at`` is the one stored before the first kill
    (so the sleep was not restarted from zero) and it ended no earlier than that original
    deadline; each activity ran exactly once (the first committed before the sleep began,
    the last ran only after it ended)."""
    db, ledger = tmp_path / "pyweft.db", tmp_path / "ledger.txt"
    ids = [f"run-{i}" for i in range(N_RUNS)]
    killed: set[str] = set()

    first = kit.launch(tmp_path, db, ledger, N_RUNS, SEED, "nap-a", mode="nap")
    try:
        kit.wait_ready(first, ledger)
        before_kill = asyncio.run(_wait_until_all_asleep(db, ledger, first, ids))
        assert first.kill(), f"first worker exited on its own:\n{first.log_tail()}"
        killed_at = time.time()
        killed.add(first.lifetime)
    finally:
        first.ensure_dead()
    after_kill = asyncio.run(_read(db, ids))
    assert all(h[SLEEP_STEP - 1].status == "open" for _, h in after_kill.values())

    # The second worker replays step 1 (writing MARK 1 again) and then re-arms the
    # sleep; kill it there, before any sleep can end (which would write MARK 2).
    second = kit.launch(tmp_path, db, ledger, N_RUNS, SEED, "nap-b", mode="nap")
    try:
        kit.wait_ready(second, ledger)
        deadline = time.monotonic() + 20
        while _marks(ledger, "nap-b", 1) != set(ids):
            assert second.proc.poll() is None, f"second worker exited:\n{second.log_tail()}"
            assert time.monotonic() < deadline, "second worker never replayed step 1"
            time.sleep(0.005)
        assert second.kill(), f"second worker exited on its own:\n{second.log_tail()}"
        killed.add(second.lifetime)
    finally:
        second.ensure_dead()
    assert not _marks(ledger, "nap-b", 2), f"sleeps of {kit.NAP_S}s ended before the 2nd kill"

    final = kit.launch(tmp_path, db, ledger, N_RUNS, SEED, "nap-c", mode="nap")
    try:
        returncode = final.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the final worker did not finish in 60s")
    finally:
        final.ensure_dead()
    assert returncode == 0, f"final worker exited {returncode}:\n{final.log_tail()}"

    finished: dict[str, float] = {}
    for run_id, (info, history) in asyncio.run(_read(db, ids)).items():
        finished.update(kit.committed_at(run_id, SEED, "nap", history))
        assert info.status == "completed", run_id
        assert info.result == kit.expected_result(run_id, SEED, "nap"), run_id
        pending = before_kill[run_id]
        nap = history[SLEEP_STEP - 1]
        assert (nap.kind, nap.status) == ("sleep", "completed"), (run_id, nap)
        assert nap.started_at == pending.started_at, (
            f"{run_id}: the sleep restarted at {nap.started_at}, it began at {pending.started_at}"
        )
        assert nap.started_at.timestamp() < killed_at
        assert pending.next_attempt_at is not None
        assert nap.finished_at is not None and nap.finished_at >= pending.next_attempt_at
        assert nap.duration_s is not None and nap.duration_s >= kit.NAP_S
    tokens = {t: k for i in ids for t, k in kit.expected_tokens(i, SEED, "nap").items()}
    events = kit.read_ledger(ledger)
    stats = kit.check_ledger(events, tokens, killed, finished)
    assert stats.problems == []
    assert stats.executions == len(tokens), "an activity ran more than once"
