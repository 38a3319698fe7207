"""``pyweft conformance`` against real worker processes: the Node.js example and the
Python ``RemoteWorker`` pass; deliberately broken workers fail the run.

Node is on every developer machine and in CI; without it these tests skip, except
with ``PYWEFT_REQUIRE_NODE=1`` (CI), where a missing ``node`` fails them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyweft.server.conformance import CHECKS, run_conformance
from support.node import node_or_skip

ROOT = Path(__file__).resolve().parents[2]
PYWEFT = str(Path(sys.executable).parent / "pyweft")
NODE_WORKER = ROOT / "examples" / "node-worker" / "worker.mjs"
PYTHON_WORKER = ROOT / "examples" / "remote_worker.py"
BROKEN_WORKER = Path(__file__).parent / "workers" / "broken_worker.py"


def conformance(
    *command: str, timeout: float = 15.0, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYWEFT, "conformance", "--timeout", str(timeout), "--", *command],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
        cwd=ROOT,
    )


async def test_the_node_example_worker_passes_every_check() -> None:
    report = await run_conformance([node_or_skip(), "--experimental-websocket", str(NODE_WORKER)])
    assert [(r.name, r.ok) for r in report.results] == [(name, True) for name, _ in CHECKS], (
        report.to_dict(),
        report.worker_log,
    )


def test_the_python_remote_worker_passes_every_check_from_the_cli() -> None:
    done = conformance(sys.executable, str(PYTHON_WORKER))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(CHECKS)} passed, 0 failed" in done.stdout.splitlines()
    for name, _ in CHECKS:
        assert any(line.startswith("pass") and name in line for line in done.stdout.splitlines())


@pytest.mark.parametrize(
    ("mode", "failing"),
    [("wrong-echo", "echo task"), ("ignore-cancel", "cancellation")],
)
def test_a_deliberately_broken_worker_fails_the_run(mode: str, failing: str) -> None:
    done = conformance(sys.executable, str(BROKEN_WORKER), timeout=3, BROKEN_MODE=mode)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("FAIL") and failing in line for line in lines), done.stdout
    assert "1 failed" in lines[-1] or any(ln.endswith("1 failed") for ln in lines), done.stdout


def test_the_json_report_names_each_check_and_the_failure() -> None:
    done = subprocess.run(
        [
            PYWEFT,
            "conformance",
            "--json",
            "--timeout",
            "3",
            "--",
            sys.executable,
            str(BROKEN_WORKER),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "BROKEN_MODE": "abrupt-shutdown"},
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert [c["name"] for c in report["checks"]] == [name for name, _ in CHECKS]
    failed = [c["name"] for c in report["checks"] if not c["ok"]]
    assert failed == ["graceful shutdown"]


def test_conformance_without_a_command_is_a_usage_error() -> None:
    done = subprocess.run([PYWEFT, "conformance"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "after --" in done.stdout + done.stderr


def test_a_worker_that_never_registers_fails_at_register_and_stops_there() -> None:
    done = conformance(sys.executable, "-c", "import time; time.sleep(30)", timeout=2)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].startswith("FAIL") and "register" in lines[0]
    assert "0 passed, 1 failed" in lines
