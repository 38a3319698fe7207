"""SIGKILL around signal handlers: every signal is applied exactly once, in arrival
order, and the state replay rebuilds is the state the killed process had.

A worker process (``handlers_worker.py``) drives run ``tally`` on an SQLite file; the
test process sends the signals through its own client engine, so they reach the run
only through the store. The first worker is SIGKILLed right before or right after the
commit that applies a batch of signals; a second worker recovers the run, replays the
recorded applications, applies the rest and returns every payload it applied.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pyweft import Engine

WORKER = Path(__file__).with_name("handlers_worker.py")


def _worker(db: Path, count: int, when: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(db), str(count), when],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
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


async def _started(client: Engine) -> None:
    from support.poll import eventually

    async def exists() -> bool:
        try:
            await client.describe("tally")
        except Exception:
            return False
        return True

    await eventually(exists, timeout=30, what="the worker started the run")
