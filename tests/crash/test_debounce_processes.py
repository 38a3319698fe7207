"""engine.debounce from several processes at once: every call joins one pending run per
key (SQLite and PostgreSQL)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyweft import Engine
from support.backends import postgres_schema, with_schema

WORKER = Path(__file__).resolve().parent / "debounce_worker.py"
PROCESSES = 2
CALLS = 8


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'pyweft.db'}"
    else:
        with postgres_schema() as (url, schema):
            yield with_schema(url, schema)


def _launch(store: str, go: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), store, "hot", str(CALLS), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def test_concurrent_callers_in_several_processes_make_one_pending_run(
    store: str, tmp_path: Path
) -> None:
    async with Engine(store, role="client"):
        pass  # the schema exists before the callers race to open the store
    go = tmp_path / "go"
    procs = [_launch(store, go) for _ in range(PROCESSES)]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "READY"
        go.touch()
        outputs = [proc.communicate(timeout=60)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    ids = {line.split()[1] for out in outputs for line in out.splitlines() if line[:3] == "ID "}
    assert len(ids) == 1, outputs
    assert all(p.returncode == 0 for p in procs), outputs
    async with Engine(store, role="client") as engine:
        pending = await engine.list(status="pending")
        assert [info.id for info in pending.items] == list(ids)
