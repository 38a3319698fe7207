"""Heartbeat details survive SIGKILL: the retry in the next process resumes from them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pyweft import Engine

WORKER = Path(__file__).resolve().parent / "activity_worker.py"


@dataclass(frozen=True, slots=True)
class Line:
    kind: str
    lifetime: str
    at: float
    what: str
    attempt: int
    data: Any


def read_lines(ledger: Path) -> list[Line]:
    if not ledger.exists():
        return []
    out = []
    for raw in ledger.read_text().splitlines():
        kind, lifetime, at, what, attempt, data = raw.split(" ", 5)
        out.append(Line(kind, lifetime, float(at), what, int(attempt), json.loads(data)))
    return out


def launch(tmp: Path, cfg: dict[str, Any]) -> subprocess.Popen[bytes]:
    with open(tmp / f"worker-{cfg['lifetime']}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(cfg)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ),
        )


def log_tail(tmp: Path, lifetime: str) -> str:
    path = tmp / f"worker-{lifetime}.log"
    return "\n".join(path.read_text(errors="replace").splitlines()[-40:]) if path.exists() else ""


async def stored_details(url: str, run_id: str) -> dict[str, int]:
    """What the store holds right now: label -> heartbeat ``n`` of each step in flight."""
    async with Engine(url, role="client") as engine:
        info = await engine.describe(run_id)
    return {d["label"]: d["n"] for d in (info.heartbeats or {}).values()}


def test_a_retry_after_sigkill_resumes_from_its_own_stored_details(tmp_path: Path) -> None:
    url, ledger = f"sqlite:///{tmp_path / 'pyweft.db'}", tmp_path / "ledger.txt"
    base = {"url": url, "ledger": str(ledger)}
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
