"""Execution tokens fence a stale attempt out of the user's own database.

The SQL is the guide's (docs/guides/activities.md, "Execution tokens"), read from
the guide itself so the two cannot drift, and run on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pyweft import Engine, RetryPolicy, VirtualClock, WorkflowContext, activity, activity_context
from pyweft import workflow as workflow_
from support.backends import postgres_schema
from support.poll import eventually

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "activities.md"


def guide_sql(marker: str) -> str:
    """The SQL block that follows ``marker`` in the guide."""
    text = GUIDE.read_text()
    found = re.search(re.escape(marker) + r".*?```sql\n(.*?)```", text, re.S)
    assert found, f"no SQL block after {marker!r} in {GUIDE}"
    return found.group(1).strip()


SCHEMA = """
CREATE TABLE payments (
    id TEXT PRIMARY KEY,
    amount INTEGER NOT NULL,
    last_token TEXT NOT NULL
)
"""

Execute = Callable[[str, dict[str, Any]], int]  # SQL, params -> rows changed


@pytest.fixture(params=["sqlite", "postgres"])
def user_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Execute, str]]:
    """The user's own database, as an executor of the guide's SQL, and its dialect."""
    if request.param == "sqlite":
        path = tmp_path / "shop.db"
        with sqlite3.connect(path) as conn:
            conn.execute(SCHEMA)
        sql = guide_sql("On SQLite")

        def run_sqlite(query: str, params: dict[str, Any]) -> int:
            with sqlite3.connect(path) as conn:
                return conn.execute(query, params).rowcount

        yield run_sqlite, sql
        return
    with postgres_schema() as (url, schema):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
            conn.execute(f'SET search_path TO "{schema}"')
            conn.execute(SCHEMA)
        sql = guide_sql("On PostgreSQL")

        def run_pg(query: str, params: dict[str, Any]) -> int:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'SET search_path TO "{schema}"')
                return conn.execute(query, params).rowcount  # type: ignore[arg-type]

        yield run_pg, sql


DB: dict[str, Any] = {}
gates: dict[int, threading.Event] = {}
outcomes: list[tuple[int, str, int]] = []


@activity(retry=RetryPolicy(max_attempts=1), cancel_grace="1s")
def record_payment(payment_id: str, amount: int) -> int:
    ctx = activity_context()
    token = ctx.attempt_token  # read when the attempt starts
    n = len(outcomes) + len(gates)
    gate = gates.setdefault(n, threading.Event())
    gate.wait(10)  # the test decides when this attempt writes
    changed = DB["execute"](DB["sql"], {"id": payment_id, "amount": amount, "token": token})
    outcomes.append((n, token, changed))
    return changed


@workflow_(name="paying")
async def paying(ctx: WorkflowContext) -> int:
    return await ctx.run(record_payment, "pay-1", 500)


async def test_a_stale_attempt_of_a_deposed_engine_is_fenced_out(
    user_db: tuple[Execute, str], tmp_path: Path
) -> None:
    execute, sql = user_db
    DB.update(execute=execute, sql=sql)
    gates.clear()
    outcomes.clear()
    clock = VirtualClock()
    url = f"sqlite:///{tmp_path / 'engine.db'}"
    first = Engine(url, workflows=[paying], clock=clock, ownership="lease")
    async with first:
        await first.start(paying, id="pay-wf")
        await eventually(lambda: 0 in gates, what="first attempt running")
    # The first engine is gone (its lease released); its attempt still runs in its thread.
    async with Engine(url, workflows=[paying], clock=clock, ownership="lease") as second:
        await eventually(lambda: 1 in gates, what="the new owner's attempt")
        gates[1].set()  # the new owner's attempt writes first
        assert await second.get_handle("pay-wf").result(timeout=10) == 1
        gates[0].set()  # then the stale one wakes up and tries
        await eventually(lambda: len(outcomes) == 2, what="the stale attempt's write")
    (_, new_token, new_changed), (_, stale_token, stale_changed) = sorted(
        outcomes, key=lambda o: -o[0]
    )
    assert stale_token < new_token  # same step, same attempt number, older owner
    assert new_changed == 1
    assert stale_changed == 0  # refused by the WHERE clause


tokens_seen: list[tuple[str, str]] = []


@activity
async def note_tokens() -> None:
    ctx = activity_context()
    tokens_seen.append((ctx.workflow_execution_token, ctx.attempt_token))


@workflow_(name="noting")
async def noting(ctx: WorkflowContext) -> None:
    await ctx.run(note_tokens)
    await ctx.sleep(10)
    await ctx.run(note_tokens)


async def test_the_execution_token_grows_when_another_engine_takes_the_run_over(
    tmp_path: Path,
) -> None:
    tokens_seen.clear()
    clock = VirtualClock()
    url = f"sqlite:///{tmp_path / 'engine.db'}"
    async with Engine(url, workflows=[noting], clock=clock, ownership="lease") as engine:
        await engine.start(noting, id="note-1")
        await eventually(lambda: clock.pending_timers() == 1, what="the sleep")
    async with Engine(url, workflows=[noting], clock=clock, ownership="lease") as engine:
        await eventually(lambda: clock.pending_timers() >= 1, what="the sleep re-armed")
        clock.advance(10)
        await engine.get_handle("note-1").result(timeout=5)
    (first_exec, first_attempt), (second_exec, second_attempt) = tokens_seen
    assert first_exec < second_exec
    assert first_exec.split(":")[:2] == second_exec.split(":")[:2]  # same run, generation
    assert first_attempt.startswith(first_exec) and second_attempt.startswith(second_exec)
