"""A damaged record quarantines its run; the engine opens and every other run carries on.

Garbage bytes are written straight into a real store's ``kv`` table (with the
``sqlite3`` module, or with psycopg on PostgreSQL) while no engine is open, as
a bad disk, a stray tool or a botched restore would leave them.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import psycopg
import pytest
from psycopg import sql

from pyweft import CorruptRecordError, Engine, WorkflowContext, activity, workflow
from pyweft.engine.replay import records
from pyweft.engine.replay.info import FAR_FUTURE, FAR_PAST
from support.backends import Backend, postgres_schema, with_schema
from support.poll import eventually

GARBAGE = b"\xc1\xff\x00 not msgpack"

ran: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


@activity
async def note(what: str) -> str:
    ran.append(what)
    return what


@workflow(name="patient")
async def patient(ctx: WorkflowContext) -> str:
    await ctx.run(note, f"{ctx.workflow_id}:before")  # journal entry :j:0000000001
    await ctx.sleep("1h")  # open step :p:0000000002 while it sleeps
    await ctx.run(note, f"{ctx.workflow_id}:after")
    return ctx.workflow_id


@dataclass
class Store:
    """A real store whose rows a test may overwrite behind the engine's back."""

    backend: Backend
    postgres_base: str | None = None
    schema: str | None = None

    def engine(self) -> Engine:
        # One engine at a time, and the tests count sleep timers on the virtual clock:
        # no claim-renewal timer (the PostgreSQL default, workflow-lease) among them.
        return self.backend.engine(workflows=[patient], ownership="none")

    def write(self, key: str, value: bytes) -> None:
        if self.schema is None:
            with sqlite3.connect(self.backend.path / "engine.db") as conn:
                conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))
            return
        assert self.postgres_base is not None
        with psycopg.connect(self.postgres_base, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.kv (key, value) VALUES (%s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
                ).format(sql.Identifier(self.schema)),
                (key, value),
            )

    def read(self, key: str) -> bytes:
        if self.schema is None:
            with sqlite3.connect(self.backend.path / "engine.db") as conn:
                row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        else:
            with psycopg.connect(self.postgres_base or "", autocommit=True) as conn:
                row = conn.execute(
                    sql.SQL("SELECT value FROM {}.kv WHERE key = %s").format(
                        sql.Identifier(self.schema)
                    ),
                    (key,),
                ).fetchone()
        assert row is not None, f"no row {key!r}"
        return bytes(row[0])


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "postgres":
        with postgres_schema() as (url, schema):
            backend = Backend(name="postgres", path=tmp_path, postgres_url=with_schema(url, schema))
            yield Store(backend, url, schema)
    else:
        yield Store(Backend(name="sqlite", path=tmp_path))


async def park(store: Store, ids: list[str]) -> None:
    """Start ``ids`` and shut down while every one of them sleeps."""
    async with store.engine() as engine:
        for i in ids:
            await engine.start(patient, id=i)
        await eventually(
            lambda: store.backend.clock.pending_timers() == len(ids), what="all asleep"
        )


def quarantine_logs(caplog: pytest.LogCaptureFixture, workflow_id: str) -> int:
    return sum(
        1
        for r in caplog.records
        if r.name == "pyweft.quarantine"
        and r.levelno >= logging.ERROR
        and repr(workflow_id) in r.getMessage()
    )


DAMAGE = {
    "bad-state": "wf:bad-state",
    "bad-journal": "wf:bad-journal:j:0000000001",
    "bad-open-step": "wf:bad-open-step:p:0000000002",
}


async def test_engine_opens_over_damaged_records_and_the_other_runs_finish(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    healthy = ["ok-1", "ok-2", "ok-3"]
    await park(store, [*healthy, *DAMAGE])
    for key in DAMAGE.values():
        store.read(key)  # each damaged key really exists before it is overwritten
        store.write(key, GARBAGE)
    store.write("ix:a:not-an-index-entry", b"")
    store.write("ix:s:running:also-not-one", b"")
    ran.clear()

    caplog.set_level(logging.ERROR, logger="pyweft.quarantine")
    async with store.engine() as engine:
        await eventually(
            lambda: store.backend.clock.pending_timers() == len(healthy), what="healthy asleep"
        )
        store.backend.clock.advance(3600)
        for i in healthy:
            assert await engine.result(i, timeout=5) == i
        assert sorted(ran) == sorted(f"{i}:after" for i in healthy)

        for workflow_id, key in DAMAGE.items():
            info = await engine.describe(workflow_id)
            assert info.status == "quarantined" and info.quarantined
            assert info.corrupt_key == key
            assert info.error is not None and key in info.error.message
            assert not engine.is_running_here(workflow_id)
            assert quarantine_logs(caplog, workflow_id) == 1
            with pytest.raises(CorruptRecordError) as raised:
                await engine.result(workflow_id, timeout=1)
            assert raised.value.workflow_id == workflow_id
            with pytest.raises(CorruptRecordError) as raised:
                await engine.history(workflow_id)
            assert raised.value.key == key

        unreadable = await engine.describe("bad-state")
        assert unreadable.workflow_type == "(unreadable)"
        readable = await engine.describe("bad-journal")
        assert readable.workflow_type == "patient"  # its state record still decodes

        # Background scans meet them again: no crash, no second log line.
        await engine.recover_all()
        await engine.recover_all()
        for workflow_id in DAMAGE:
            assert quarantine_logs(caplog, workflow_id) == 1

        listed: dict[str, str] = {}
        cursor = None
        pages = 0
        while True:
            page = await engine.list(limit=2, cursor=cursor)
            listed.update({i.id: i.status for i in page.items})
            pages += 1
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert pages == 3
        assert listed == {
            **dict.fromkeys(healthy, "completed"),
            **dict.fromkeys(DAMAGE, "quarantined"),
        }

    # A later engine finds the markers: still quarantined, not logged again.
    caplog.clear()
    async with store.engine() as engine:
        for workflow_id in DAMAGE:
            assert (await engine.describe(workflow_id)).status == "quarantined"
            assert quarantine_logs(caplog, workflow_id) == 0


async def test_a_repaired_record_lifts_the_quarantine_and_the_run_finishes(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await park(store, ["mended"])
    key = DAMAGE["bad-journal"].replace("bad-journal", "mended")
    good = store.read(key)
    store.write(key, GARBAGE)
    async with store.engine() as engine:
        assert (await engine.describe("mended")).status == "quarantined"
    store.write(key, good)  # restored from a backup

    ran.clear()
    async with store.engine() as engine:
        await eventually(lambda: store.backend.clock.pending_timers() == 1, what="asleep")
        assert (await engine.describe("mended")).status == "running"
        store.backend.clock.advance(3600)
        assert await engine.result("mended", timeout=5) == "mended"
        assert (await engine.describe("mended")).corrupt_key is None
    assert ran == ["mended:after"]


async def test_purge_and_retention_go_past_a_finished_run_with_a_damaged_state(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await park(store, ["keep-a", "broken", "keep-b"])
    async with store.engine() as engine:
        store.backend.clock.advance(3600)
        for i in ("keep-a", "broken", "keep-b"):
            await engine.result(i, timeout=5)
    store.write("wf:broken", GARBAGE)

    caplog.set_level(logging.ERROR, logger="pyweft.quarantine")
    async with store.backend.engine(workflows=[patient], retention={"completed": 60}) as engine:
        store.backend.clock.advance(3600)
        assert await engine.sweep_retention() == 2
        assert await engine.sweep_retention() == 0
        assert quarantine_logs(caplog, "broken") == 1
        assert (await engine.describe("broken")).status == "quarantined"
        assert await engine.purge(status="completed") == 0
        page = await engine.list()
        assert [i.id for i in page.items] == ["broken"]


async def test_a_finished_run_with_a_damaged_journal_entry_can_still_be_purged(
    store: Store,
) -> None:
    await park(store, ["old"])
    async with store.engine() as engine:
        store.backend.clock.advance(3600)
        await engine.result("old", timeout=5)
    store.write("wf:old:j:0000000001", GARBAGE)
    async with store.engine() as engine:
        assert (await engine.describe("old")).status == "quarantined"
        assert await engine.purge(status="completed") == 1
        assert (await engine.list()).items == []


async def test_history_and_describe_read_stored_times_no_calendar_holds(store: Store) -> None:
    await park(store, ["odd"])
    key = "wf:odd:j:0000000001"
    step = records.decode_step(store.read(key))
    odd_step = msgspec.structs.replace(step, started_at=float("inf"), finished_at=1e300)
    store.write(key, records.encode(odd_step))
    pending_key = "wf:odd:p:0000000002"
    pend = records.decode_pending(store.read(pending_key))
    store.write(pending_key, records.encode(msgspec.structs.replace(pend, deadline=float("nan"))))
    state = records.decode_state(store.read("wf:odd"))
    store.write("wf:odd", records.encode(msgspec.structs.replace(state, updated_at=-1e300)))

    async with backend_reader(store) as engine:
        history = await engine.history("odd")
        assert [s.step for s in history.steps] == [1, 2]
        assert history.steps[0].started_at == FAR_FUTURE
        assert history.steps[0].finished_at == FAR_FUTURE
        assert history.steps[1].next_attempt_at == FAR_PAST
        info = await engine.describe("odd")
        assert info.updated_at == FAR_PAST and info.status == "running"


def backend_reader(store: Store) -> Engine:
    """An engine that only reads: it drives nothing, so the odd records stay as written."""
    return store.backend.engine(recover=False)
