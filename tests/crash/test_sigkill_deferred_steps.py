"""SIGKILL of an engine whose worker-served steps were done but not yet recorded.

A step a worker ran is recorded with the run's next commit (its next task, or
its end), not on its own (see engine/replay/step_commits.py). The engine process
is killed right before such a batch reaches the store, with outcomes it had
already handed to the workflow; a new engine process resumes the runs. Checks:
every run's result is right, and no step ran twice (each was run once by the
worker and taken from its stored outcome after the restart), on SQLite and
PostgreSQL.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.backends import postgres_schema, with_schema

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deferred_step_proc import STEPS, expected

PROC = Path(__file__).resolve().parent / "deferred_step_proc.py"

N_RUNS = 12


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'pyweft.db'}"
        return
    with postgres_schema() as (base, schema):
        yield with_schema(base, schema)


def spawn(tmp: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    with open(tmp / f"{name}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(PROC), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


@pytest.mark.parametrize("when", ["next-task", "end"])
def test_outcomes_handed_over_but_not_recorded_are_not_run_again(
    url: str, when: str, tmp_path: Path
) -> None:
    ledger, out = tmp_path / "ledger", tmp_path / "results.json"
    worker = spawn(tmp_path, "worker", "worker", url, str(ledger))
    try:
        first = spawn(tmp_path, "engine", "engine", url, str(ledger), str(N_RUNS), str(out), when)
        assert first.wait(60) == -9, (tmp_path / "engine.log").read_text()  # SIGKILLed
        assert not out.exists()
        ran_before = len(ledger.read_text().splitlines())
        assert ran_before > 0
        again = spawn(
            tmp_path, "engine", "engine", url, str(ledger), str(N_RUNS), str(out), "never"
        )
        assert again.wait(90) == 0, (tmp_path / "engine.log").read_text()
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
    results = json.loads(out.read_text())
    assert results == [expected(i) for i in range(N_RUNS)]
    runs = Counter(tuple(line.split()[:2]) for line in ledger.read_text().splitlines())
    assert len(runs) == N_RUNS * STEPS
    twice = {step: n for step, n in runs.items() if n > 1}
    assert not twice, f"steps that ran more than once: {twice}"
