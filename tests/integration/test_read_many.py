"""Several reads in one trip (``read_many``), and the reads a drain of parked runs makes.

Every adapter must answer ``read_many`` exactly as the same ``get`` and ``scan``
calls would, one by one; stores without it are read one call at a time. A run
brought back into memory by a signal finds the signals buffered for it with its
journal, oldest first, whatever order they were read in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pyweft import Engine, MemoryStorage, WorkflowContext, workflow
from pyweft.storage import SQLiteStorage
from pyweft.storage.base import Get, Put, Read, Scan, Storage, read_many
from pyweft.storage.factory import open_storage
from pyweft.testing.faults import FaultyStorage
from support.backends import Backend, postgres_schema, with_schema
from support.poll import eventually

returned: set[str] = set()


@workflow(name="parked_once")
async def parked(ctx: WorkflowContext) -> Any:
    value = await ctx.wait_for_signal("go")
    returned.add(ctx.workflow_id)
    return {"signal": value}


class CountingStorage:
    """A real store; counts single gets and scans by key prefix (``read_many`` and the
    other optional extensions pass through uncounted)."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner
        self.reads: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def get(self, key: str) -> bytes | None:
        self.reads[key.split(":", 1)[0] + ":"] += 1
        return await self._inner.get(key)

    async def scan(self, prefix: str, **kw: Any) -> list[tuple[str, bytes]]:
        self.reads[prefix.split(":", 1)[0] + ":"] += 1
        return await self._inner.scan(prefix, **kw)


def evicted(engine: Engine, workflow_id: str) -> bool:
    core = engine._core
    return workflow_id in core.residency.evicted and workflow_id not in core.runs


async def parked_and_evicted(engine: Engine, workflow_id: str) -> None:
    await eventually(lambda: evicted(engine, workflow_id), what="run evicted")


ROWS = {
    "a": b"1",
    "ab": b"\x00\xff binary",
    "ab:c": b"",
    "b": b"3",
    "b\u00e9": b"4",  # non-ASCII keys sort by UTF-8 bytes
    "c": b"x" * 5000,
}

READS: list[Read] = [
    Get(key="a"),
    Get(key="missing"),
    Scan(prefix="a"),
    Scan(prefix="a", limit=0),
    Scan(prefix="", reverse=True, limit=3),
    Scan(prefix="", start="ab", end="b\u00e9"),
    Scan(prefix="nothing"),
    Get(key="c"),
    Scan(prefix="b", reverse=True),
]


async def one_by_one(store: Storage, reads: Sequence[Read]) -> list[Any]:
    out: list[Any] = []
    for r in reads:
        if isinstance(r, Get):
            out.append(await store.get(r.key))
        else:
            out.append(
                await store.scan(
                    r.prefix, start=r.start, end=r.end, limit=r.limit, reverse=r.reverse
                )
            )
    return out


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    if request.param == "memory":
        yield MemoryStorage()
    elif request.param == "sqlite":
        sqlite = SQLiteStorage(tmp_path / "reads.db")
        yield sqlite
        await sqlite.close()
    else:
        with postgres_schema() as (url, schema):
            pg = open_storage(with_schema(url, schema))
            yield pg
            await pg.close()


async def test_read_many_answers_as_the_same_gets_and_scans_would(store: Storage) -> None:
    await store.batch([Put(key=k, value=v) for k, v in ROWS.items()])
    expected = await one_by_one(store, READS)
    assert await read_many(store, READS) == expected
    assert expected[4] == [("c", ROWS["c"]), ("b\u00e9", b"4"), ("b", b"3")]
    for single in READS:  # alone, too
        assert await read_many(store, [single]) == await one_by_one(store, [single])
    assert await read_many(store, []) == []


async def test_read_many_rejects_a_negative_scan_limit(store: Storage) -> None:
    with pytest.raises(ValueError, match="limit"):
        await read_many(store, [Get(key="a"), Scan(prefix="a", limit=-1)])


async def test_faulty_storage_reads_one_at_a_time_so_each_read_can_fault(tmp_path: Path) -> None:
    sqlite = SQLiteStorage(tmp_path / "faulty.db")
    faulty = FaultyStorage(sqlite, seed=1)
    try:
        assert not hasattr(faulty, "read_many")
        await faulty.batch([Put(key="a", value=b"1")])
        assert await read_many(faulty, [Get(key="a"), Scan(prefix="a")]) == [
            b"1",
            [("a", b"1")],
        ]
    finally:
        await sqlite.close()


@workflow(name="two_names")
async def two_names(ctx: WorkflowContext) -> Any:
    first = await ctx.wait_for_signal("later")  # parked here while "x" signals pile up
    xs = [await ctx.wait_for_signal("x") for _ in range(3)]
    return {"first": first, "xs": xs}


async def test_a_restored_run_takes_its_buffered_signals_oldest_first(backend: Backend) -> None:
    async with backend.engine(workflows=[two_names], max_cached_runs=0) as engine:
        handle = await engine.start(two_names, id="two")
        await parked_and_evicted(engine, "two")
        for i in range(3):  # each one restores the run, which parks again on "later"
            await handle.signal("x", i)
            await parked_and_evicted(engine, "two")
        await handle.signal("later", "go")
        assert await handle.result(timeout=10) == {"first": "go", "xs": [0, 1, 2]}


async def test_a_signal_that_restores_a_run_is_read_with_its_journal(tmp_path: Path) -> None:
    """Sending reads in one trip, and the restore reads the run with its signals in
    one more: no read of the state before the load, no scan of the signals after it."""
    inner = SQLiteStorage(tmp_path / "one-trip.db")
    store = CountingStorage(inner)  # counts single gets and scans, not read_many
    try:
        async with Engine(store, workflows=[parked], max_cached_runs=0) as engine:  # type: ignore[arg-type]
            handle = await engine.start(parked, id="trip")
            await parked_and_evicted(engine, "trip")
            store.reads.clear()
            await handle.signal("go", 5)
            await eventually(
                lambda: "trip" in returned and "trip" not in engine._core.runs,
                what="run finished",
            )
            # Left out: the wake-up poller's scan, and the list of quarantined runs,
            # read once per process at the first load.
            assert {k: n for k, n in store.reads.items() if k not in ("wake:", "q:")} == {}
            assert (await handle.result(timeout=5))["signal"] == 5
    finally:
        await inner.close()
