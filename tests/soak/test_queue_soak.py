"""The workflow-queue proof at full size: 500 runs, 3 engines on PostgreSQL, one
SIGKILLed mid-run (see ``tests/crash/test_queue_processes.py``)."""

from __future__ import annotations

import pytest

from crash.test_queue_processes import run_proof

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(300)]


@pytest.mark.xfail(
    strict=False,
    reason="known bug, open in issue 14: with 500 runs on 3 engines and a SIGKILL the "
    "runs saw 6 at once against concurrency=5 in 3 of 4 runs on 2026-12-01; the 60-run "
    "process test (tests/crash/test_queue_processes.py) still holds the limit",
)
def test_five_hundred_queued_runs_on_three_engines_stay_within_the_limit() -> None:
    run_proof(runs=500, timeout_s=240)
