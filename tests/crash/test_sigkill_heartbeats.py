"""Heartbeat details survive SIGKILL: the retry in the next process resumes from them."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyweft import Engine
from support.backends import postgres_schema, with_schema
from support.crashkit_activities import launch, log_tail, read_lines


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The workers' store: SQLite, or PostgreSQL with per-run claims (short TTL)."""
    if request.param == "sqlite":
        yield {"url": f"sqlite:///{tmp_path / 'pyweft.db'}"}
        return
    with postgres_schema() as (url, schema):
        yield {"url": with_schema(url, schema), "ownership": "workflow-lease"}


async def stored_details(url: str, run_id: str) -> dict[str, int]:
    """What the store holds right now: label -> heartbeat ``n`` of each step in flight."""
    async with Engine(url, role="client") as engine:
        info = await engine.describe(run_id)
    return {d["label"]: d["n"] for d in (info.heartbeats or {}).values()}


def test_a_retry_after_sigkill_resumes_from_its_own_stored_details(
    tmp_path: Path, store: dict[str, Any]
) -> None:
    url, ledger = store["url"], tmp_path / "ledger.txt"
    base = {**store, "ledger": str(ledger)}
    first = launch(tmp_path, {**base, "lifetime": "a", "start": ["hb-1"], "stall": True})
    try:
        deadline = time.monotonic() + 30
        seen: dict[str, int] = {}
        while not (len(seen) == 2 and min(seen.values()) >= 10):
            assert first.poll() is None, f"worker exited:\n{log_tail(tmp_path, 'a')}"
            assert time.monotonic() < deadline, f"details never stored: {seen}"
            time.sleep(0.02)
            if any(line.kind == "BEAT" for line in read_lines(ledger)):
                seen = asyncio.run(stored_details(url, "hb-1"))
        first.kill()
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    after_kill = asyncio.run(stored_details(url, "hb-1"))
    assert set(after_kill) == {"left", "right"}
    beaten = {
        label: max(
            line.data["n"]
            for line in read_lines(ledger)
            if line.kind == "BEAT" and line.what == f"hb-1/{label}"
        )
        for label in ("left", "right")
    }
    for label, n in after_kill.items():
        assert seen[label] <= n <= beaten[label], (label, seen, after_kill, beaten)

    second = launch(tmp_path, {**base, "lifetime": "b", "wait_for": ["hb-1"]})
    try:
        assert second.wait(timeout=60) == 0, log_tail(tmp_path, "b")
    except subprocess.TimeoutExpired:
        pytest.fail(f"the second worker did not finish:\n{log_tail(tmp_path, 'b')}")
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()

    lines = read_lines(ledger)
    starts = {line.what: line for line in lines if line.kind == "START" and line.lifetime == "b"}
    for label in ("left", "right"):
        start = starts[f"hb-1/{label}"]
        # The retry read its own step's latest stored details, never its sibling's.
        assert start.data == {"label": label, "n": after_kill[label]}, (label, start)
    (done,) = [line for line in lines if line.kind == "DONE"]
    assert [r["label"] for r in done.data] == ["left", "right"]
    assert [r["resumed_from"]["n"] for r in done.data] == [after_kill["left"], after_kill["right"]]
    assert asyncio.run(stored_details(url, "hb-1")) == {}  # cleared on success
