"""A run's headers and trace reach the attempts worker processes run, from the task
record: the first worker is SIGKILLed mid-attempt and the retry, on another worker
process, sees the same headers and joins the same trace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROC = Path(__file__).resolve().parent / "observability_task_proc.py"


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_headers_and_trace_reach_a_retry_after_its_worker_was_killed(tmp_path: Path) -> None:
    db, notes, spans = tmp_path / "t.db", tmp_path / "notes.jsonl", tmp_path / "spans.jsonl"
    base = [str(db), str(notes), str(spans)]

    def spawn(mode: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{mode}-{time.monotonic_ns()}.log").open("wb") as err:
            out = subprocess.PIPE if mode == "engine" else subprocess.DEVNULL
            return subprocess.Popen(
                [sys.executable, str(PROC), mode, *base], stdout=out, stderr=err
            )

    engine = spawn("engine")
    first = spawn("worker")
    second = None
    try:
        deadline = time.monotonic() + 30
        while not _lines(notes):
            assert engine.poll() is None and first.poll() is None, "a process died early"
            assert time.monotonic() < deadline, "the first attempt never started"
            time.sleep(0.01)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        second = spawn("worker")
        out, _ = engine.communicate(timeout=60)
        assert engine.returncode == 0
        assert json.loads(out) == 2
    finally:
        for proc in (engine, first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    noted = _lines(notes)
    assert [n["attempt"] for n in noted] == [1, 2]
    assert noted[0]["pid"] == first.pid and second is not None
    assert noted[1]["pid"] == second.pid
    assert all(n["headers"]["tenant"] == "t-9" and "traceparent" in n["headers"] for n in noted)
    got = _lines(spans)
    (start,) = [s for s in got if s["name"] == "start far"]
    (retry,) = [s for s in got if s["name"] == "activity hold"]  # the killed one never ended
    assert retry["pid"] == second.pid
    assert retry["trace_id"] == start["trace_id"]
    assert retry["parent_id"] == start["span_id"]
