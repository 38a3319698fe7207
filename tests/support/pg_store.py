"""Fixtures for tests of the PostgreSQL adapter itself: a fresh schema, and a store on it.

Import them into a test module (``from support.pg_store import pg, storage``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from pyweft.storage import PostgresStorage
from support.backends import postgres_schema


@pytest.fixture
def pg() -> Iterator[tuple[str, str]]:
    """``(url, schema)`` of a schema of its own, dropped afterwards."""
    with postgres_schema() as url_and_schema:
        yield url_and_schema


@pytest.fixture
async def storage(pg: tuple[str, str]) -> AsyncIterator[PostgresStorage]:
    url, schema = pg
    store = PostgresStorage(url, schema=schema)
    try:
        yield store
    finally:
        await store.close()
