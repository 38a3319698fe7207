"""The task-queue kill scenario at full size: 2,000 tasks, 4 workers on PostgreSQL and
2 on SQLite, one worker SIGKILLed midway (the default suite runs 200 tasks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.backends import postgres_schema, require_postgres, with_schema
from support.task_queue_kit import kill_one_worker_midway

pytestmark = pytest.mark.slow


def test_two_thousand_tasks_on_postgres_survive_a_killed_worker(tmp_path: Path) -> None:
    require_postgres()
    with postgres_schema() as (url, schema):
        kill_one_worker_midway(with_schema(url, schema), tmp_path, n_workers=4, n_runs=500)


def test_two_thousand_tasks_on_sqlite_survive_a_killed_worker(tmp_path: Path) -> None:
    kill_one_worker_midway(f"sqlite:///{tmp_path / 'pyweft.db'}", tmp_path, n_workers=2, n_runs=500)
