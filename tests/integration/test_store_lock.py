"""One engine per SQLite file by default: the file lock, the client role, the defaults.

These run in one process; tests/crash/test_store_lock_processes.py shows the same
with real processes (and SIGKILL).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from pathlib import Path

import pytest

from pyweft import (
    Engine,
    MemoryStorage,
    SQLiteStorage,
    StoreInUseError,
    WorkflowContext,
    activity,
    workflow,
)
from support.backends import postgres_schema, with_schema
from support.poll import eventually

executions: list[str] = []


@activity
async def note(tag: str) -> str:
    executions.append(tag)
    return tag


@workflow
async def once(ctx: WorkflowContext, tag: str) -> str:
    return await ctx.run(note, tag)


@workflow
async def waits(ctx: WorkflowContext) -> str:
    return str(await ctx.wait_for_signal("go"))


def url(path: Path) -> str:
    return f"sqlite:///{path}"


def rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute("SELECT count(*) FROM kv").fetchone()
    conn.close()
    return int(count)


async def test_a_second_engine_on_the_same_file_is_refused_naming_the_first(
    tmp_path: Path,
) -> None:
    db = tmp_path / "app.db"
    async with Engine(url(db), workflows=[waits]) as first:
        await first.start(waits, id="w")
        before = rows(db)
        second = Engine(url(db), workflows=[waits])
        with pytest.raises(StoreInUseError) as info:
            await second.open()
        assert info.value.holder is not None
        assert f"pid {os.getpid()}" in info.value.holder
        assert first.engine_id in info.value.holder
        message = str(info.value)
        assert "ownership='lease'" in message and "ownership='workflow-lease'" in message
        assert rows(db) == before  # the refused engine wrote nothing
        assert not second.is_running_here("w") and first.is_running_here("w")
        holder = json.loads((tmp_path / "app.db.lock").read_text())
        assert holder["pid"] == os.getpid() and holder["engine_id"] == first.engine_id


async def test_a_storage_instance_on_the_same_file_is_refused_too(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    async with Engine(url(db)):
        storage = SQLiteStorage(db)
        try:
            with pytest.raises(StoreInUseError):
                await Engine(storage).open()
        finally:
            await storage.close()


async def test_shutdown_releases_the_lock_for_the_next_engine(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    async with Engine(url(db)):
        pass
    assert (tmp_path / "app.db.lock").read_text() == ""  # no stale holder is named
    async with Engine(url(db)) as again:
        assert again.ownership == "none"


async def test_a_refused_open_can_be_retried_after_the_holder_leaves(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    first = Engine(url(db))
    await first.open()
    with pytest.raises(StoreInUseError):
        await Engine(url(db)).open()
    await first.shutdown()
    async with Engine(url(db)):
        pass


async def test_a_client_opens_beside_the_engine_and_its_start_is_driven_by_the_engine(
    tmp_path: Path,
) -> None:
    db = tmp_path / "app.db"
    executions.clear()
    async with (
        Engine(url(db), workflows=[once], poll_interval=0.02) as engine,
        Engine(url(db), workflows=[once], role="client") as client,
    ):
        assert client.role == "client"
        handle = await client.start(once, "from-client", id="c-1")
        assert not client.is_running_here("c-1")
        assert await handle.result(timeout=10) == "from-client"
        assert engine.is_running_here("c-1") or (await engine.describe("c-1")).is_terminal
    assert executions == ["from-client"]


async def test_a_client_never_recovers_runs_and_its_resume_leaves_the_run_to_the_engine(
    tmp_path: Path,
) -> None:
    db = tmp_path / "app.db"
    async with Engine(url(db), workflows=[waits]) as engine:
        await engine.start(waits, id="w")
    async with Engine(url(db), workflows=[waits], role="client") as client:
        await asyncio.sleep(0)
        assert not client.is_running_here("w")
        await client.suspend("w")
        await client.resume("w")
        assert not client.is_running_here("w")
        assert (await client.describe("w")).status == "running"
    async with Engine(url(db), workflows=[waits]) as engine:
        await eventually(lambda: engine.is_running_here("w"), what="recovered by the engine")
        await engine.signal("w", "go", "now")
        assert await engine.get_handle("w").result(timeout=5) == "now"


async def test_a_delayed_start_from_a_client_is_started_by_the_engine(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    executions.clear()
    async with (
        Engine(url(db), workflows=[once], poll_interval=0.02) as engine,
        Engine(url(db), workflows=[once], role="client") as client,
    ):
        handle = await client.start(once, "later", id="d-1", start_delay=0.2)
        assert (await client.describe("d-1")).status == "pending"
        assert await handle.result(timeout=10) == "later"
        assert (await engine.describe("d-1")).status == "completed"
    assert executions == ["later"]


async def test_lease_and_workflow_lease_engines_take_no_file_lock(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    async with (
        Engine(url(db), ownership="workflow-lease"),
        Engine(url(db), ownership="workflow-lease"),
    ):
        pass
    assert not (tmp_path / "shared.db.lock").exists()


async def test_the_default_joins_the_mode_the_store_already_uses(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    async with Engine(url(db), ownership="lease", lease_wait_timeout=1):
        pass
    async with Engine(url(db), lease_wait_timeout=1) as default:
        assert default.ownership == "lease"
    assert not (tmp_path / "shared.db.lock").exists()


def test_the_default_mode_is_none_on_local_stores(tmp_path: Path) -> None:
    assert Engine(MemoryStorage()).ownership == "none"
    assert Engine(url(tmp_path / "a.db")).ownership == "none"


async def test_the_default_mode_on_postgresql_is_workflow_lease() -> None:
    with postgres_schema() as (server, schema):
        async with (
            Engine(with_schema(server, schema), workflows=[once]) as a,
            Engine(with_schema(server, schema), workflows=[once]) as b,
        ):
            assert a.ownership == b.ownership == "workflow-lease"
            executions.clear()
            handles = [await a.start(once, f"t{i}", id=f"pg-{i}") for i in range(5)]
            assert [await h.result(timeout=10) for h in handles] == [f"t{i}" for i in range(5)]
            assert sorted(executions) == [f"t{i}" for i in range(5)]
            assert (await b.store_ownership()).mode == "workflow-lease"
