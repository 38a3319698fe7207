"""The workflow-queue proof at full size: 500 runs, 3 engines on PostgreSQL, one
SIGKILLed mid-run (see ``tests/crash/test_queue_processes.py``)."""

from __future__ import annotations

import pytest

from crash.test_queue_processes import run_proof

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(300)]


def test_five_hundred_queued_runs_on_three_engines_stay_within_the_limit() -> None:
    run_proof(runs=500, timeout_s=240)
