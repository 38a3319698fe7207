"""Headers and the trace of a run survive SIGKILL: start -> workflow -> activity (in a
thread) -> child, then a new process resumes the run in the same trace, linked to it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().parent / "observability_worker.py"


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_headers_and_trace_survive_sigkill(tmp_path: Path) -> None:
    db, notes, spans = tmp_path / "obs.db", tmp_path / "notes.jsonl", tmp_path / "spans.jsonl"
    args = [sys.executable, str(WORKER), str(db), str(notes), str(spans)]
    log = tmp_path / "first.log"
    with log.open("wb") as err:
        first = subprocess.Popen([*args, "first"], stderr=err)
    try:
        deadline = time.monotonic() + 20
        # The child's run span is written when the child ends: the parent waits for "go".
        while not any(s["name"] == "run kid" for s in _lines(spans)):
            assert first.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the first process never reached its wait"
            time.sleep(0.01)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    assert first.returncode == -signal.SIGKILL
    second = subprocess.run([*args, "resume"], capture_output=True, timeout=60)
    assert second.returncode == 0, second.stderr.decode()
    assert json.loads(second.stdout) == "t-7/t-7"

    noted = {n["label"]: n["headers"] for n in _lines(notes)}
    assert set(noted) == {"before", "child", "after"}
    assert all(h["tenant"] == "t-7" and "traceparent" in h for h in noted.values())

    got = _lines(spans)
    (caller,) = [s for s in got if s["name"] == "caller"]
    (start,) = [s for s in got if s["name"] == "start relay"]
    runs = [s for s in got if s["name"] == "run relay"]
    (resumed,) = runs  # the first life never ended its run span: it was killed
    assert {s["trace_id"] for s in got} == {caller["trace_id"]}
    assert start["parent_id"] == caller["span_id"]
    assert resumed["pid"] != caller["pid"]
    assert resumed["parent_id"] == start["span_id"]
    assert resumed["links"] == [start["span_id"]]
    assert resumed["attributes"]["pyweft.resumed"] is True
    (after,) = [s for s in got if s["name"] == "activity note" and s["pid"] == resumed["pid"]]
    assert after["parent_id"] == resumed["span_id"]
