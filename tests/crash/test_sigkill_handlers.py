"""SIGKILL around signal handlers: every signal is applied exactly once, in arrival
order, and the state replay rebuilds is the state the killed process had.

A worker process (``handlers_worker.py``) drives run ``tally`` on an SQLite file; the
test process sends the signals through its own client engine, so they reach the run
only through the store. The first worker is SIGKILLed right before or right after the
commit that applies a batch of signals; a second worker recovers the run, replays the
recorded applications, applies the rest and returns every payload it applied.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pyweft import Engine

WORKER = Path(__file__).with_name("handlers_worker.py")


def _worker(
    db: Path, count: int, when: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(db), str(count), when, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=None if env is None else {**os.environ, **env},
    )


@pytest.mark.parametrize("when", ["before", "after"])
async def test_signals_applied_by_a_handler_survive_sigkill_exactly_once(
    tmp_path: Path, when: str
) -> None:
    db = tmp_path / "pyweft.db"
    count = 30
    async with Engine(f"sqlite:///{db}", role="client", poll_interval=0.05) as client:
        first = _worker(db, count, when)
        await _started(client)
        for i in range(count // 2):
            await client.signal("tally", "add", i)
        _, err = first.communicate(timeout=30)
        assert first.returncode == -signal.SIGKILL, err.decode()
        for i in range(count // 2, count):
            await client.signal("tally", "add", i)
        second = _worker(db, count, "never")
        out, err = second.communicate(timeout=60)
        assert second.returncode == 0, err.decode()
        result = json.loads(out.decode().strip().splitlines()[-1])
        assert result == {"seen": list(range(count)), "total": sum(range(count))}
        history = await client.history("tally")
    assert [s.kind for s in history] == ["condition", "activity"]


async def test_an_async_update_handler_killed_before_answering_answers_once(
    tmp_path: Path,
) -> None:
    """The worker dies right after the handler's activity step is committed and before
    the answer: the next worker replays the step (the activity does not run again),
    resumes the handler and writes the one answer the waiting caller gets."""
    db, ledger = tmp_path / "pyweft.db", tmp_path / "ledger.txt"
    env = {"PYWEFT_LEDGER": str(ledger)}
    async with Engine(f"sqlite:///{db}", role="client", poll_interval=0.05) as client:
        first = _worker(db, 0, "after", "update", env=env)
        await _started(client, "orders")
        caller = asyncio.create_task(
            client.update("orders", "buy", "tea", timeout=60, idempotency_key="once")
        )
        _, err = await asyncio.to_thread(first.communicate, timeout=30)
        assert first.returncode == -signal.SIGKILL, err.decode()
        assert ledger.read_text() == "tea\n"  # the activity ran, its step is committed
        assert not caller.done()
        second = _worker(db, 0, "never", "update", env=env)
        assert await caller == "charged tea"
        again = await client.update("orders", "buy", "tea", timeout=10, idempotency_key="once")
        assert again == "charged tea"  # the same update: its one stored answer
        await client.update("orders", "close", timeout=10)
        out, err = await asyncio.to_thread(second.communicate, timeout=60)
        assert second.returncode == 0, err.decode()
        assert json.loads(out.decode().strip().splitlines()[-1]) == ["tea"]
        kinds = [s.kind for s in await client.history("orders")]
    assert ledger.read_text() == "tea\n"  # once per committed step
    assert kinds.count("activity") == 1


async def _started(client: Engine, workflow_id: str = "tally") -> None:
    from support.poll import eventually

    async def exists() -> bool:
        try:
            await client.describe(workflow_id)
        except Exception:
            return False
        return True

    await eventually(exists, timeout=30, what="the worker started the run")


async def test_signals_sent_by_a_workflow_arrive_once_when_the_sender_dies_mid_step(
    tmp_path: Path,
) -> None:
    """The sender is killed right after the signal is buffered and before its step is
    recorded: the replayed step sends again with the same derived signal id."""
    db = tmp_path / "pyweft.db"
    count = 5
    first = _worker(db, count, "after", "relay")
    _, err = first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL, err.decode()
    second = _worker(db, count, "never", "relay")
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err.decode()
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result == {"seen": list(range(count)), "total": sum(range(count))}
    async with Engine(f"sqlite:///{db}", role="client") as client:
        sent = [s.kind for s in await client.history("relay")]
        assert sent == ["signal_workflow"] * count
        assert await client.get_handle("relay").result(timeout=10) == count
