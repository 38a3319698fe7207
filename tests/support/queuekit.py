"""Workflow-queue proof with real processes on PostgreSQL (issue 14).

The runs check the queue's limit themselves, outside pyweft: while a run's one
activity executes it holds a row in ``{schema}.wfq_active`` (keyed by run, so a run
re-executed after its engine was killed counts once), and on entering it records
the rows it saw in ``wfq_peaks`` (how many, and which: a failure names the runs and
their processes). The first start of each run is numbered in ``wfq_starts`` (the
order runs began, for the priority check).

A killed engine's row stays until its run is taken over and re-executed, though the
run stopped at the kill. That does not make the count an artefact: the run's slot
is deleted only by its end, which comes after the re-execution deleted the row, so
every row is a run holding a slot, and the count passes the queue's concurrency only
if the slots held do (issue 14's overshoot was six runs working, none killed).
"""

from __future__ import annotations

import os
import threading
import time

import psycopg
from psycopg import sql

from pyweft import Queue, WorkflowContext, activity, workflow

CONCURRENCY = 5
QUEUE = Queue("proof", concurrency=CONCURRENCY, priority=True)
WORK_S = 0.03

_local = threading.local()
_config: dict[str, str] = {}


def configure(url: str, schema: str) -> None:
    _config.update(url=url, schema=schema)


def create_tables(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        for ddl in (
            "CREATE TABLE {}.wfq_active (run_id text PRIMARY KEY, pid int)",
            "CREATE TABLE {}.wfq_peaks (n int, run_id text, seen text)",
            "CREATE TABLE {}.wfq_starts (seq bigserial, run_id text UNIQUE)",
        ):
            conn.execute(sql.SQL(ddl).format(sql.Identifier(schema)))


def _conn() -> psycopg.Connection[tuple[object, ...]]:
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = psycopg.connect(_config["url"], autocommit=True)
        _local.conn = conn
    return conn


@activity
def occupy(run_id: str, pid: int) -> int:
    """Hold a row while working; return how many runs were working at once."""
    conn, schema = _conn(), sql.Identifier(_config["schema"])
    conn.execute(
        sql.SQL(
            "INSERT INTO {}.wfq_active VALUES (%s, %s) ON CONFLICT (run_id) DO UPDATE SET pid = %s"
        ).format(schema),
        (run_id, pid, pid),
    )
    conn.execute(
        sql.SQL("INSERT INTO {}.wfq_starts (run_id) VALUES (%s) ON CONFLICT DO NOTHING").format(
            schema
        ),
        (run_id,),
    )
    row = conn.execute(
        sql.SQL(
            "SELECT count(*), string_agg(run_id || ' in ' || pid, ', ' ORDER BY run_id) "
            "FROM {}.wfq_active"
        ).format(schema)
    ).fetchone()
    seen = int(row[0]) if row else 0
    conn.execute(
        sql.SQL("INSERT INTO {}.wfq_peaks VALUES (%s, %s, %s)").format(schema),
        (seen, run_id, row[1] if row else None),
    )
    time.sleep(WORK_S)
    conn.execute(sql.SQL("DELETE FROM {}.wfq_active WHERE run_id = %s").format(schema), (run_id,))
    return seen


@workflow
async def queued_job(ctx: WorkflowContext, run_id: str) -> int:
    return await ctx.run(occupy, run_id, os.getpid())


def read_results(url: str, schema: str) -> tuple[int, list[str], list[str]]:
    """(the most runs any run saw working at once, run ids in order of first start, and
    for each run that saw more than ``CONCURRENCY``: which runs, in which process)."""
    s = sql.Identifier(schema)
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL("SELECT coalesce(max(n), 0) FROM {}.wfq_peaks").format(s)
        ).fetchone()
        over = conn.execute(
            sql.SQL("SELECT run_id, seen FROM {}.wfq_peaks WHERE n > %s").format(s),
            (CONCURRENCY,),
        )
        excess = [f"{r[0]} saw {r[1]}" for r in over.fetchall()]
        order = conn.execute(sql.SQL("SELECT run_id FROM {}.wfq_starts ORDER BY seq").format(s))
        return int(row[0]) if row else 0, [str(r[0]) for r in order.fetchall()], excess


class Probe:
    """One connection that watches the counters while the engines run."""

    def __init__(self, url: str, schema: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self._s = sql.Identifier(schema)

    def started(self) -> int:
        row = self._conn.execute(
            sql.SQL("SELECT count(*) FROM {}.wfq_starts").format(self._s)
        ).fetchone()
        return int(row[0]) if row else 0

    def working_in(self, pid: int) -> int:
        """How many runs process ``pid`` is working on right now."""
        row = self._conn.execute(
            sql.SQL("SELECT count(*) FROM {}.wfq_active WHERE pid = %s").format(self._s), (pid,)
        ).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self._conn.close()
