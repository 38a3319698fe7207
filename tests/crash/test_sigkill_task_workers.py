"""Task queues with real processes: an engine that only orchestrates, worker processes on
two queues, one worker SIGKILLed midway.

Checks: every run's recorded results are right (each step recorded once, by
construction of the journal); the killed worker's in-flight attempts ran at most
twice; nothing else ran twice; SIGTERM drains a worker (it finishes what it runs,
and exits cleanly).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.backends import postgres_schema, with_schema

PROC = Path(__file__).resolve().parent / "task_queue_proc.py"
sys.path.insert(0, str(PROC.parent))
from task_queue_proc import expected  # noqa: E402


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    if request.param == "sqlite":
        yield "sqlite", f"sqlite:///{tmp_path / 'pyweft.db'}"
        return
    with postgres_schema() as (url, schema):
        yield "postgres", with_schema(url, schema)


def spawn(tmp: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    with open(tmp / f"{name}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, str(PROC), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def lines(ledger: Path) -> list[list[str]]:
    if not ledger.exists():
        return []
    return [ln.split() for ln in ledger.read_text().splitlines() if ln.strip()]


def wait_for(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def test_a_sigkilled_worker_loses_nothing_and_repeats_only_its_in_flight_work(
    store: tuple[str, str], tmp_path: Path
) -> None:
    kind, url = store
    n_workers = 2 if kind == "sqlite" else 4
    n_runs = 50  # 200 tasks over queues qa and qb
    ledger, out = tmp_path / "ledger", tmp_path / "results.json"
    # Each its own store connection, none shares the engine's process.
    T0 = time.monotonic()
    engine = spawn(tmp_path, "engine", "engine", url, str(ledger), str(n_runs), str(out))
    workers = {
        f"w{i}": spawn(tmp_path, f"w{i}", "worker", url, str(ledger), f"w{i}")
        for i in range(n_workers)
    }
    try:
        wait_for(
            lambda: (
                sum(1 for ln in lines(ledger) if ln[0] == "END" and ln[3] == "w0") >= 15
                or engine.poll() is not None
            ),
            60,
            "worker w0 to be busy",
        )
        print("busy", time.monotonic() - T0)
        workers["w0"].send_signal(signal.SIGKILL)
        workers["w0"].wait()
        assert engine.wait(timeout=90) == 0, (tmp_path / "engine.log").read_text()[-3000:]
    finally:
        for proc in [engine, *workers.values()]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in workers.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    print("done", time.monotonic() - T0)
    results = json.loads(out.read_text())
    assert results == [expected(i) for i in range(n_runs)]
    entries = lines(ledger)
    begins = Counter(ln[1] for ln in entries if ln[0] == "BEGIN")
    ends = Counter(ln[1] for ln in entries if ln[0] == "END")
    assert len(begins) == n_runs * 4
    # An attempt w0 had claimed when it died (its result unstored) runs again elsewhere:
    # at most once more, and only those, so no more than w0's 8 slots.
    by_w0 = {ln[1] for ln in entries if ln[0] == "BEGIN" and ln[3] == "w0"}
    repeated = {token for token, n in begins.items() if n > 1}
    for token, n in begins.items():
        limit = 2 if token in by_w0 else 1
        assert n <= limit, f"{token} began {n} times (w0 ran it: {token in by_w0})"
        assert ends[token] >= 1
    assert len(repeated) <= 8
    # The survivors stopped cleanly on SIGTERM (they drain, then exit 0).
    for name, proc in workers.items():
        if name != "w0":
            assert proc.returncode == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
