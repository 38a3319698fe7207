"""PostgreSQL notifications made while writes queue ride with the next group commit.

``max_inflight_writes=1`` forces the interleaving: the first write is in flight, the
second queues, and the notification made then goes with the second, in its
transaction, instead of costing a statement of its own.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyweft import Engine, Worker, WorkflowContext, activity, workflow
from pyweft.storage import Expect, PostgresStorage, Put
from pyweft.storage.base import notifies_on_commit, ringing
from support.backends import postgres_schema
from support.poll import eventually

pytestmark = pytest.mark.postgres


async def test_a_notify_made_while_writes_queue_rides_with_the_next_group() -> None:
    with postgres_schema() as (url, schema):
        writer = PostgresStorage(url, schema=schema, max_inflight_writes=1)
        reader = PostgresStorage(url, schema=schema)
        heard: list[int] = []
        try:
            await writer.get("warm-up")
            unlisten = await reader.listen("topic", lambda: heard.append(1))
            statements: list[bytes] = []
            query = writer._query

            def counted(conn: Any, sql: bytes, params: Any) -> Any:
                statements.append(sql)
                return query(conn, sql, params)

            writer._query = counted  # type: ignore[method-assign]
            first = asyncio.ensure_future(writer.batch([Put(key="a", value=b"1")]))
            await asyncio.sleep(0)  # the first write is in flight now
            second = asyncio.ensure_future(writer.batch([Put(key="b", value=b"2")]))
            await asyncio.sleep(0)  # the second queues behind it
            assert writer._writes.queued == 1
            await asyncio.gather(first, second, writer.notify("topic"))
            assert len(statements) == 2  # the notify took no trip of its own
            assert b"pg_notify" in statements[1]
            await eventually(lambda: heard == [1])
            assert await reader.get("b") == b"2"
            await writer.notify("topic")  # nothing queued: it goes at once, on its own
            await eventually(lambda: heard == [1, 1])
            assert len(statements) == 3
            await unlisten()
        finally:
            await writer.close()
            await reader.close()


async def test_rings_made_with_a_write_go_in_its_statement_and_only_once_it_commits() -> None:
    """``storage.base.ringing``: the write's own statement notifies; a write that
    fails raises and rings nobody; outside the block, writes ring nothing."""
    with postgres_schema() as (url, schema):
        writer = PostgresStorage(url, schema=schema)
        reader = PostgresStorage(url, schema=schema)
        heard: list[str] = []
        try:
            await writer.get("warm-up")
            unlisten = await reader.listen("tasks", lambda: heard.append("tasks"))
            unlisten2 = await reader.listen("results", lambda: heard.append("results"))
            statements: list[bytes] = []
            query = writer._query

            def counted(conn: Any, sql: bytes, params: Any) -> Any:
                statements.append(sql)
                return query(conn, sql, params)

            writer._query = counted  # type: ignore[method-assign]
            assert notifies_on_commit(writer)
            with ringing(["tasks", "results"]):
                assert await writer.conditional_batch(
                    [Expect(key="k", value=None)], [Put(key="k", value=b"1")]
                )
            assert len(statements) == 1 and b"pg_notify" in statements[0]
            await eventually(lambda: sorted(heard) == ["results", "tasks"])
            assert await reader.get("k") == b"1"
            # Outside the block the same kind of write rings nothing.
            await writer.batch([Put(key="k2", value=b"2")])
            assert b"pg_notify" not in statements[-1]
            # A write the server refuses (a NUL byte cannot be stored in a text key is
            # caught before; a value of the wrong type is refused) rings nobody.
            heard.clear()
            with ringing(["tasks"]), pytest.raises(TypeError):
                await writer.conditional_batch([], [Put(key="k3", value="text")])  # type: ignore[arg-type]
            await asyncio.sleep(0.2)
            assert heard == []
            await unlisten()
            await unlisten2()
        finally:
            await writer.close()
            await reader.close()


@activity(queue="media")
async def _shrink(x: int) -> int:
    return x // 2


@workflow
async def _shrinking(ctx: WorkflowContext, x: int) -> int:
    for _ in range(3):
        x = await ctx.run(_shrink, x)
    return x


async def test_task_queues_on_postgres_ring_with_their_writes() -> None:
    """The engine's task writes and the worker's outcome writes carry their rings: no
    notification costs a statement of its own, and the run still moves at once."""
    with postgres_schema() as (url, schema):
        rings: list[str] = []
        send = PostgresStorage._execute

        async def counted(self: PostgresStorage, action: str, *args: Any, **kw: Any) -> Any:
            rings.append(action)
            return await send(self, action, *args, **kw)

        PostgresStorage._execute = counted  # type: ignore[method-assign]
        try:
            async with (
                Engine(f"{url}?schema={schema}", workflows=[_shrinking], serve_queues=[]) as eng,
                Worker(
                    f"{url}?schema={schema}",
                    activities=[_shrink],
                    queues=["media"],
                    poll_interval=30.0,  # a lost ring would stall the run for 30 s
                ),
            ):
                handle = await eng.start(_shrinking, 64)
                assert await handle.result(timeout=10) == 8
        finally:
            PostgresStorage._execute = send  # type: ignore[method-assign]
        assert "commit" in rings
        assert "notify" not in rings
