"""Task queues with real processes: an engine that only orchestrates, worker processes on
two queues, one worker SIGKILLed midway.

Checks: every run's recorded results are right (each step recorded once, by
construction of the journal); the killed worker's in-flight attempts ran at most
twice; nothing else ran twice; SIGTERM drains a worker (it finishes what it runs,
and exits cleanly).
"""

from __future__ import annotations

import asyncio
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
from task_queue_proc import chain, expected, linger  # noqa: E402


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    if request.param == "sqlite":
        yield "sqlite", f"sqlite:///{tmp_path / 'pyweft.db'}"
        return
    with postgres_schema() as (url, schema):
        yield "postgres", with_schema(url, schema)


from pyweft import WorkflowContext, workflow  # noqa: E402


@workflow
async def linger_once(ctx: WorkflowContext, x: int) -> int:
    return await ctx.run(linger, x)


_ = chain


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


def start_cli_worker(tmp: Path, url: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    args = ["worker", "task_queue_proc", "--db", url, "--queue", "slow"]
    args += ["--drain-timeout", "20", "--poll-interval", "0.1"]
    with open(tmp / "cli.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "pyweft.cli.main", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )


async def test_sigterm_drains_a_cli_worker_it_finishes_what_it_runs(tmp_path: Path) -> None:
    from pyweft import Engine

    url = f"sqlite:///{tmp_path / 'pyweft.db'}"
    ledger = tmp_path / "ledger"
    async with Engine(url, workflows=[linger_once], serve_queues=[], poll_interval=0.1) as eng:
        handle = await eng.start(linger_once, 1, id="slow-1")
        env = {
            **os.environ,
            "TASK_QUEUE_LEDGER": str(ledger),
            "PYTHONPATH": os.pathsep.join([str(PROC.parent), os.environ.get("PYTHONPATH", "")]),
        }
        proc = start_cli_worker(tmp_path, url, env)
        try:
            deadline = time.monotonic() + 30
            while not any(ln[0] == "BEGIN" for ln in lines(ledger)):
                assert proc.poll() is None, (tmp_path / "cli.log").read_text()
                assert time.monotonic() < deadline, "the CLI worker never started the task"
                await asyncio.sleep(0.01)
            proc.send_signal(signal.SIGTERM)  # mid-attempt: it must finish it, then exit
            assert await handle.result(timeout=20) == 101
            assert await asyncio.to_thread(proc.wait, 20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        kinds = [ln[0] for ln in lines(ledger)]
        assert kinds == ["BEGIN", "END"]  # ran once, to the end, by the draining worker
        assert await eng.workers(include_gone=True) == []  # it unregistered on the way out
