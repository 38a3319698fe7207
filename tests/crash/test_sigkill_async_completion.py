"""Async completion from another process, with the owner alive, down, and killed meanwhile.

The owner is a worker process (``activity_worker.py``, mode ``async``); the test
process completes by token through a client engine. Run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyweft import ActivityTokenNotFoundError, Engine
from support.backends import postgres_schema, with_schema
from support.crashkit_activities import launch, log_tail, read_lines


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str | None]]:
    """(store URL, ownership mode for the workers)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'pyweft.db'}", None
        return
    with postgres_schema() as (url, schema):
        yield with_schema(url, schema), "workflow-lease"


def wait_parked(ledger: Path, run_id: str, proc: Any, tmp: Path, lifetime: str) -> str:
    """The token of ``run_id``'s async activity once its step is parked in the store."""
    deadline = time.monotonic() + 30
    while True:
        asks = [ln for ln in read_lines(ledger) if ln.kind == "ASK" and ln.what == run_id]
        if asks:
            return str(asks[-1].data)
        assert proc.poll() is None, f"worker exited:\n{log_tail(tmp, lifetime)}"
        assert time.monotonic() < deadline, f"{run_id} never asked"
        time.sleep(0.01)


async def complete_when_parked(url: str, token: str, result: Any) -> None:
    """Complete ``token`` as soon as its step is parked (the owner may be writing it)."""
    async with Engine(url, role="client") as client:
        deadline = time.monotonic() + 30
        while True:
            try:
                await client.complete_activity(token, result)
                return
            except ActivityTokenNotFoundError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.01)


def finish(tmp: Path, base: dict[str, Any], lifetime: str, run_id: str) -> Any:
    """Run a worker that recovers ``run_id`` and waits for its result."""
    proc = launch(tmp, {**base, "lifetime": lifetime, "wait_for": [run_id]})
    try:
        assert proc.wait(timeout=90) == 0, log_tail(tmp, lifetime)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_completion_from_another_process_with_the_owner_alive_down_and_being_killed(
    store: tuple[str, str | None], tmp_path: Path
) -> None:
    url, ownership = store
    ledger = tmp_path / "ledger.txt"
    base: dict[str, Any] = {"url": url, "ledger": str(ledger), "mode": "async"}
    if ownership:
        base["ownership"] = ownership

    # 1. The owner is alive: the completion reaches it through the store.
    alive = launch(
        tmp_path, {**base, "lifetime": "a", "start": ["r-alive"], "wait_for": ["r-alive"]}
    )
    try:
        token = wait_parked(ledger, "r-alive", alive, tmp_path, "a")
        asyncio.run(complete_when_parked(url, token, {"ok": "alive"}))
        assert alive.wait(timeout=60) == 0, log_tail(tmp_path, "a")
    finally:
        if alive.poll() is None:
            alive.kill()
            alive.wait()

    # 2. The owner is down: the completion is stored, and applied on recovery.
    down = launch(tmp_path, {**base, "lifetime": "b", "start": ["r-down"], "stall": True})
    try:
        token = wait_parked(ledger, "r-down", down, tmp_path, "b")
        asyncio.run(_until_listed(url, "r-down"))
        down.kill()
        down.wait()
    finally:
        if down.poll() is None:
            down.kill()
            down.wait()
    asyncio.run(complete_when_parked(url, token, {"ok": "down"}))
    finish(tmp_path, base, "c", "r-down")

    # 3. The owner is killed while the completion is on its way.
    racing = launch(tmp_path, {**base, "lifetime": "d", "start": ["r-race"], "stall": True})
    try:
        token = wait_parked(ledger, "r-race", racing, tmp_path, "d")
        # Parked in the store first: killed before that, the attempt never parks and its
        # token never becomes valid (the next lifetime runs the attempt again).
        asyncio.run(_until_listed(url, "r-race"))
        killer = threading.Timer(random.uniform(0.0, 0.05), racing.kill)
        killer.start()
        asyncio.run(complete_when_parked(url, token, {"ok": "race"}))
        killer.join()
        racing.wait()
    finally:
        if racing.poll() is None:
            racing.kill()
            racing.wait()
    finish(tmp_path, base, "e", "r-race")

    lines = read_lines(ledger)
    done = {ln.what: ln.data for ln in lines if ln.kind == "DONE"}
    assert done == {"r-alive": {"ok": "alive"}, "r-down": {"ok": "down"}, "r-race": {"ok": "race"}}
    for run_id in ("r-alive", "r-down", "r-race"):
        asks = [ln for ln in lines if ln.kind == "ASK" and ln.what == run_id]
        assert len(asks) == 1, f"{run_id}: the async activity ran again on recovery: {asks}"


async def _until_listed(url: str, run_id: str) -> None:
    async with Engine(url, role="client") as client:
        deadline = time.monotonic() + 30
        while not await client.pending_activities(run_id):
            assert time.monotonic() < deadline, f"{run_id} never parked"
            await asyncio.sleep(0.01)
