"""Keyed reconciliation after a real SIGKILL between dispatch and record, for every answer.

A worker dispatches a keyed activity that never reports back and is SIGKILLed; a
second worker recovers the run with ``verify`` configured to give one answer (or
with no ``verify`` at all). Checked: what the run returns, and how many times the
activity was dispatched.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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


CASES = [
    # (run id, verify answer, expected result or error, dispatches in total)
    ("v-not", "not_completed", "charged-v-not", 2),
    ("v-done", "completed", "verified-v-done", 1),
    ("v-unavail", "unavailable", "ActivityReconciliationError", 1),
    ("v-unknown", "indeterminate", "ActivityReconciliationError", 1),
    ("noverify", None, "ActivityReconciliationError", 1),
]


@pytest.mark.parametrize(("run_id", "answer", "expected", "dispatches"), CASES)
def test_every_verify_answer_after_sigkill_between_dispatch_and_record(
    tmp_path: Path,
    store: dict[str, Any],
    run_id: str,
    answer: str | None,
    expected: str,
    dispatches: int,
) -> None:
    ledger = tmp_path / "ledger.txt"
    base: dict[str, Any] = {**store, "ledger": str(ledger), "mode": "keyed"}
    first = launch(tmp_path, {**base, "lifetime": "a", "start": [run_id], "stall": True})
    try:
        deadline = time.monotonic() + 30
        while not any(ln.kind == "CHARGE" for ln in read_lines(ledger)):
            assert first.poll() is None, f"worker exited:\n{log_tail(tmp_path, 'a')}"
            assert time.monotonic() < deadline, "never dispatched"
            time.sleep(0.01)
        first.kill()  # dispatched, outcome never recorded
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()

    second = launch(tmp_path, {**base, "lifetime": "b", "wait_for": [run_id], "verify": answer})
    try:
        assert second.wait(timeout=60) == 0, log_tail(tmp_path, "b")
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    lines = read_lines(ledger)
    (done,) = [ln.data for ln in lines if ln.kind == "DONE"]
    if expected == "ActivityReconciliationError":
        assert done["error_type"] == expected, done
        key = f"charge/{run_id}" if answer else f"ship/{run_id}"
        assert repr(key) in done["message"], done
    else:
        assert done == expected
    assert len([ln for ln in lines if ln.kind == "CHARGE"]) == dispatches
    verifies = [ln for ln in lines if ln.kind == "VERIFY"]
    assert len(verifies) == (1 if answer else 0)
