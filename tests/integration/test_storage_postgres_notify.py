"""PostgreSQL notifications made while writes queue ride with the next group commit.

``max_inflight_writes=1`` forces the interleaving: the first write is in flight, the
second queues, and the notification made then goes with the second, in its
transaction, instead of costing a statement of its own.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyweft.storage import PostgresStorage, Put
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
