"""Task queues with real processes: an engine that only orchestrates, worker processes on
two queues, one worker SIGKILLed midway.

Checks: every run's recorded results are right (each step recorded once, by
construction of the journal); the killed worker's in-flight attempts ran at most
twice; nothing else ran twice; SIGTERM drains a worker (it finishes what it runs,
and exits cleanly).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyweft import Engine, WorkflowContext, workflow
from support.backends import postgres_schema, with_schema
from support.task_queue_kit import PROC, kill_one_worker_midway, lines

sys.path.insert(0, str(PROC.parent))
from task_queue_proc import linger


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    if request.param == "sqlite":
        yield "sqlite", f"sqlite:///{tmp_path / 'pyweft.db'}"
        return
    with postgres_schema() as (url, schema):
        yield "postgres", with_schema(url, schema)


@workflow
async def linger_once(ctx: WorkflowContext, x: int) -> int:
    return await ctx.run(linger, x)


def test_a_sigkilled_worker_loses_nothing_and_repeats_only_its_in_flight_work(
    store: tuple[str, str], tmp_path: Path
) -> None:
    kind, url = store
    # 200 tasks over queues qa and qb; 2 workers on SQLite, 4 on PostgreSQL.
    kill_one_worker_midway(url, tmp_path, n_workers=2 if kind == "sqlite" else 4, n_runs=50)


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
