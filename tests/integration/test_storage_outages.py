"""Runs stranded by a real storage outage are resumed by the same live engine.

Each test breaks the store for real, lets acknowledged runs hit the outage
mid-flight, then repairs it and checks that every run finishes in the engine
that was running all along, with no activity run twice and nothing lost:

* SQLite on a tmpfs that fills up (``SQLITE_FULL``), then gets space back;
* PostgreSQL whose backend is terminated (``pg_terminate_backend``) while a
  commit waits on a table lock held by another session.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pyweft import Engine, SQLiteStorage, WorkflowContext, activity, workflow
from support.backends import postgres_schema, with_schema
from support.poll import eventually

ledger: Counter[str] = Counter()
_ledger_lock = threading.Lock()
go = threading.Event()


@activity
def reserve(order: int) -> str:
    with _ledger_lock:
        ledger[f"reserve-{order}"] += 1
    go.wait(30)
    return "x" * 2000  # a record big enough to need fresh pages


@activity
def confirm(order: int) -> int:
    with _ledger_lock:
        ledger[f"confirm-{order}"] += 1
    return order


@workflow
async def order_flow(ctx: WorkflowContext, order: int) -> int:
    try:
        await ctx.run(reserve, order)
    except Exception:  # as users write it: must never see the outage
        return -1
    return await ctx.run(confirm, order)


@pytest.fixture(autouse=True)
def _reset() -> None:
    ledger.clear()
    go.clear()


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> Path:
    """Write a file until the file system is full; returns it (delete it to free space)."""
    filler = path / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (1 << 20, 1 << 16, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * size)
    assert os.statvfs(path).f_bavail == 0
    return filler


async def test_a_full_disk_strands_runs_until_space_returns_then_they_finish(
    tmp_path: Path,
) -> None:
    with small_tmpfs(tmp_path / "disk", "8m") as disk:
        storage = SQLiteStorage(str(disk / "app.db"), busy_timeout_s=0.5)
        async with Engine(storage, workflows=[order_flow]) as engine:
            handles = [await engine.start(order_flow, i, id=f"o-{i}") for i in range(30)]
            await eventually(lambda: len(ledger) == 30, what="every run to call reserve")
            filler = await asyncio.to_thread(fill, disk)
            go.set()
            await eventually(
                lambda: engine.stats().stranded == 30, timeout=20, what="all 30 runs stranded"
            )
            assert not any(k.startswith("confirm") for k in ledger)
            filler.unlink()
            results = await asyncio.gather(*(h.result(timeout=60) for h in handles))
            assert results == list(range(30))
            stats = engine.stats()
            assert stats.storage_failures >= 30 and stats.stranded == 0
        await storage.close()
    # Each reserve ran once: its outcome was kept across the outage, not re-run.
    assert all(ledger[f"reserve-{i}"] == 1 and ledger[f"confirm-{i}"] == 1 for i in range(30))


def _terminate_waiting_backends(url: str, schema: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND wait_event_type = 'Lock'",
            (f"pyweft:{schema}",),
        ).fetchall()
    return len(rows)


async def test_postgres_backends_killed_mid_commit_strand_runs_until_they_resume() -> None:
    with postgres_schema() as (url, schema):
        engine_url = with_schema(url, schema)
        async with Engine(engine_url, workflows=[order_flow]) as engine:
            handles = [await engine.start(order_flow, i, id=f"o-{i}") for i in range(5)]
            await eventually(lambda: len(ledger) == 5, what="every run to call reserve")
            locker = psycopg.connect(url)
            try:
                locker.execute(
                    sql.SQL("LOCK TABLE {}.kv IN EXCLUSIVE MODE").format(sql.Identifier(schema))
                )
                go.set()  # the reserve outcomes now queue behind the lock
                killed = 0

                def some_killed() -> bool:
                    nonlocal killed
                    killed += _terminate_waiting_backends(url, schema)
                    return killed > 0 and engine.stats().stranded > 0

                await eventually(some_killed, timeout=20, what="a commit to be killed mid-flight")
            finally:
                locker.rollback()
                locker.close()
            results = await asyncio.gather(*(h.result(timeout=60) for h in handles))
            assert results == list(range(5))
            assert engine.stats().storage_failures >= 1
    assert all(ledger[f"reserve-{i}"] == 1 and ledger[f"confirm-{i}"] == 1 for i in range(5))
