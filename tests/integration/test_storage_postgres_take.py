"""``take`` on PostgreSQL: rows another taker holds are skipped, held keys refuse a batch.

The interleavings are forced with a second, raw connection that holds the row lock
(as a concurrent take would) or the advisory lock of a key (as a writer would)
while the store's take runs; neither makes the take wait.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg import sql

from pyweft.storage import Delete, Expect, PostgresStorage, Put
from pyweft.storage.base import Op
from support.pg_store import pg, storage  # noqa: F401  (fixtures these tests take)

pytestmark = pytest.mark.postgres


def move(
    pairs: list[tuple[str, bytes]], peeked: list[bytes | None]
) -> list[tuple[list[Expect], list[Op]]]:
    """Plan: move each taken ``q:k`` to ``t:q:k``, if it still holds what was read."""
    return [
        ([Expect(key=k, value=v)], [Delete(key=k), Put(key="t:" + k, value=v)]) for k, v in pairs
    ]


async def seed(storage: PostgresStorage, n: int) -> None:
    await storage.batch([Put(key=f"q:{i:03d}", value=b"%d" % i) for i in range(n)])


async def test_a_take_skips_the_rows_another_taker_holds_without_waiting(
    pg: tuple[str, str], storage: PostgresStorage
) -> None:
    url, schema = pg
    await seed(storage, 4)
    with psycopg.connect(url) as other:  # a transaction: holds its row lock until rollback
        query = sql.SQL("SELECT key FROM {} WHERE key = 'q:000' FOR UPDATE").format(
            sql.Identifier(schema, "kv")
        )
        assert other.execute(query).fetchall() == [("q:000",)]
        got = await asyncio.wait_for(storage.take("q:", limit=2, plan=move), 5)
        assert got == [True, True]
        assert [k for k, _ in await storage.scan("t:")] == ["t:q:001", "t:q:002"]
        other.rollback()
    assert [k for k, _ in await storage.scan("q:")] == ["q:000", "q:003"]


async def test_a_planned_batch_whose_key_a_writer_holds_is_refused_not_waited_for(
    pg: tuple[str, str], storage: PostgresStorage
) -> None:
    url, _ = pg
    await seed(storage, 2)
    with psycopg.connect(url) as writer:  # mid-batch: holds the key's lock until it ends
        writer.execute("SELECT pg_advisory_xact_lock(%s)", (storage._lock_id("t:q:001"),))
        got = await asyncio.wait_for(storage.take("q:", limit=5, plan=move), 5)
        writer.rollback()
    assert got == [True, False]
    assert await storage.scan("q:") == [("q:001", b"1")]  # refused: nothing of it written
    assert await storage.scan("t:") == [("t:q:000", b"0")]


async def test_racing_takes_on_8_connections_never_take_a_row_twice(
    pg: tuple[str, str], storage: PostgresStorage
) -> None:
    url, schema = pg
    await seed(storage, 300)
    stores = [PostgresStorage(url, schema=schema, max_connections=1) for _ in range(8)]
    taken: list[list[str]] = [[] for _ in stores]

    async def drain(i: int) -> None:
        got: list[tuple[str, bytes]] = []

        def plan(
            pairs: list[tuple[str, bytes]], peeked: list[bytes | None]
        ) -> list[tuple[list[Expect], list[Op]]]:
            got[:] = pairs
            return move(pairs, peeked)

        while True:
            oks = await stores[i].take("q:", limit=7, plan=plan)
            taken[i] += [k for (k, _), ok in zip(got, oks, strict=True) if ok]
            if not got:
                return

    try:
        await asyncio.gather(*(drain(i) for i in range(len(stores))))
    finally:
        await asyncio.gather(*(s.close() for s in stores))
    every = [k for keys in taken for k in keys]
    assert sorted(every) == [f"q:{i:03d}" for i in range(300)]  # each once, none lost
    assert await storage.scan("q:") == []
    assert sum(1 for keys in taken if keys) > 1  # they shared the work


async def test_a_schema_made_before_take_existed_gains_it_on_open(pg: tuple[str, str]) -> None:
    url, schema = pg
    first = PostgresStorage(url, schema=schema)
    await seed(first, 1)
    await first.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP FUNCTION {}").format(sql.Identifier(schema, "pyweft_try_write_group_v1"))
        )
    again = PostgresStorage(url, schema=schema)
    try:
        assert await again.take("q:", limit=1, plan=move) == [True]
    finally:
        await again.close()
