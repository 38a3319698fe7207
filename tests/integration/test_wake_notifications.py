"""Stores that can notify deliver cross-process messages at once, not at the next poll.

Every engine here polls only every 60 s, so anything delivered within the
test's few-second timeouts came through a notification.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import psycopg
import pytest

from pyweft import Engine, MemoryStorage, Storage, WorkflowContext, workflow
from support.backends import postgres_schema, with_schema
from support.poll import eventually

SLOW_POLL = 60.0


@workflow(name="listener")
async def listener(ctx: WorkflowContext) -> str:
    ctx.on_query("ready", lambda: True)
    first = await ctx.wait_for_signal("first")
    second = await ctx.wait_for_signal("second")
    return f"{first} {second}"


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[str | Storage]:
    if request.param == "memory":
        yield MemoryStorage()
    else:
        with postgres_schema() as (url, schema):
            yield with_schema(url, schema)


def engine(store: str | Storage, **kw: object) -> Engine:
    return Engine(store, workflows=[listener], poll_interval=SLOW_POLL, **kw)  # type: ignore[arg-type]


async def test_a_signal_through_another_engine_arrives_without_waiting_for_a_poll(
    store: str | Storage,
) -> None:
    async with engine(store) as owner, engine(store, role="client") as other:
        handle = await owner.start(listener, id="l-1")
        await eventually(lambda: owner.is_running_here("l-1"), what="driven")
        started = time.monotonic()
        await other.signal("l-1", "first", "a")
        assert await other.query("l-1", "ready", timeout=5) is True  # answered at once too
        await other.signal("l-1", "second", "b")
        assert await handle.result(timeout=5) == "a b"
        assert time.monotonic() - started < SLOW_POLL / 4


async def test_a_dropped_listening_connection_comes_back_and_delivers_again() -> None:
    with postgres_schema() as (url, schema):
        store = with_schema(url, schema)
        async with engine(store) as owner, engine(store, role="client") as other:
            handle = await owner.start(listener, id="l-2")
            await eventually(lambda: owner.is_running_here("l-2"), what="driven")
            with psycopg.connect(url, autocommit=True) as admin:
                killed = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE 'LISTEN %%' AND application_name = %s",
                    (f"pyweft:{schema}",),
                ).fetchall()
            assert killed, "no listening connection found"
            await asyncio.sleep(0.3)  # the listeners notice and reconnect (with backoff)
            await other.signal("l-2", "first", "a")
            await other.signal("l-2", "second", "b")
            assert await handle.result(timeout=10) == "a b"
