"""A PostgreSQL server restart mid-flight: runs in the live engine resume by themselves.

The test restarts the real server (``pg_ctlcluster ... restart``), so it runs in
the soak step of CI (marked ``slow``), where nothing else uses the server at the
same time. Every connection the engine held dies; commits in flight fail with an
unknown outcome. When the server is back, every run must finish in the engine
that was running all along, each activity having run once.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from pyweft import Engine, WorkflowContext, activity, workflow
from support.backends import postgres_schema, with_schema
from support.poll import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ledger: Counter[str] = Counter()
_lock = threading.Lock()
go = threading.Event()


@activity
def reserve(order: int) -> int:
    with _lock:
        ledger[f"reserve-{order}"] += 1
    go.wait(60)
    return order


@activity
def confirm(order: int) -> int:
    with _lock:
        ledger[f"confirm-{order}"] += 1
    return order * 10


@workflow
async def order_flow(ctx: WorkflowContext, order: int) -> int:
    try:
        await ctx.run(reserve, order)
    except Exception:
        return -1
    return await ctx.run(confirm, order)


def _restart_postgres() -> None:
    if shutil.which("pg_ctlcluster") is None:
        pytest.fail("pg_ctlcluster is not installed; this test restarts the local server")
    (version,) = [p.name for p in Path("/etc/postgresql").iterdir()]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart", "-m", "fast"],
        check=True,
        capture_output=True,
    )


def _server_answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


async def test_runs_resume_in_the_live_engine_after_a_postgres_restart() -> None:
    with postgres_schema() as (url, schema):
        async with Engine(with_schema(url, schema), workflows=[order_flow]) as engine:
            handles = [await engine.start(order_flow, i, id=f"o-{i}") for i in range(10)]
            await eventually(lambda: len(ledger) == 10, what="every run to call reserve")
            restart = asyncio.ensure_future(asyncio.to_thread(_restart_postgres))
            await asyncio.sleep(0.2)  # the server is going down
            go.set()  # the outcomes commit while the server goes down and comes back
            await restart
            await eventually(lambda: _server_answers(url), timeout=60, what="the server")
            results = await asyncio.gather(*(h.result(timeout=120) for h in handles))
            assert results == [i * 10 for i in range(10)]
    assert all(ledger[f"reserve-{i}"] == 1 and ledger[f"confirm-{i}"] == 1 for i in range(10))
