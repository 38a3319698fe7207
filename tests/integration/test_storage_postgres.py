"""PostgresStorage: the conformance suite plus what only a shared server can get wrong.

Every test here needs the server at ``$PYWEFT_TEST_POSTGRES_URL``; they skip
when it is unreachable and fail when ``PYWEFT_REQUIRE_POSTGRES=1``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pyweft.errors import ConfigurationError, StorageClosedError, StorageError
from pyweft.storage import Delete, Expect, PostgresStorage, Put, Storage, open_storage
from pyweft.testing import StorageConformance
from support.backends import drop_schema, require_postgres, with_schema
from support.pg_store import pg, storage  # noqa: F401  (fixtures these tests take)
from support.poll import eventually

pytestmark = pytest.mark.postgres

RACERS = 8  # separate storages, so separate connections, as separate processes would be


def admin(url: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(url, autocommit=True)


class TestPostgresConformance(StorageConformance):
    _schemas: list[tuple[str, str]]

    @pytest.fixture(autouse=True)
    def _drop_schemas_afterwards(self) -> Iterator[None]:
        self._schemas = []
        yield
        for url, schema in self._schemas:
            drop_schema(url, schema)

    async def make_storage(self, tmp_path: Path) -> Storage:
        url = require_postgres()
        schema = f"pyweft_test_{tmp_path.name.lower()[-40:]}".replace("-", "_")
        self._schemas.append((url, schema))
        drop_schema(url, schema)  # a rerun with the same tmp_path name starts empty
        return PostgresStorage(url, schema=schema)

    async def reopen_storage(self, tmp_path: Path) -> Storage | None:
        url, schema = self._schemas[-1]
        return PostgresStorage(url, schema=schema)

    async def break_storage(self, storage: Storage) -> bool:
        assert isinstance(storage, PostgresStorage)
        url, schema = self._schemas[-1]
        await storage.get("warm-up")  # the table exists before we attach the fault
        with admin(url) as conn:
            conn.execute(
                sql.SQL(
                    "CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    "RAISE EXCEPTION 'could not extend file: No space left on device' "
                    "USING ERRCODE = 'disk_full'; END $$"
                ).format(fn=sql.Identifier(schema, "disk_full"))
            )
            conn.execute(
                sql.SQL(
                    "CREATE TRIGGER disk_full BEFORE INSERT OR UPDATE OR DELETE ON {kv} "
                    "FOR EACH ROW EXECUTE FUNCTION {fn}()"
                ).format(kv=sql.Identifier(schema, "kv"), fn=sql.Identifier(schema, "disk_full"))
            )
        return True

    async def repair_storage(self, storage: Storage) -> None:
        url, schema = self._schemas[-1]
        with admin(url) as conn:
            conn.execute(
                sql.SQL("DROP TRIGGER disk_full ON {kv}").format(kv=sql.Identifier(schema, "kv"))
            )


# --- PostgreSQL-specific behaviour ------------------------------------------------------


async def racing(pg: tuple[str, str]) -> list[PostgresStorage]:
    url, schema = pg
    stores = [PostgresStorage(url, schema=schema, max_connections=1) for _ in range(RACERS)]
    await asyncio.gather(*(store.get("warm-up") for store in stores))  # all connected
    return stores


async def test_racing_creates_of_absent_keys_on_8_connections_have_one_winner_each(
    pg: tuple[str, str],
) -> None:
    stores = await racing(pg)
    try:
        for round_ in range(100):
            key = f"absent:{round_:03d}"
            results = await asyncio.gather(
                *(
                    store.conditional_batch(
                        [Expect(key=key, value=None)], [Put(key=key, value=b"%d" % i)]
                    )
                    for i, store in enumerate(stores)
                )
            )
            assert results.count(True) == 1, (key, results)
            assert await stores[0].get(key) == b"%d" % results.index(True)
    finally:
        await asyncio.gather(*(store.close() for store in stores))


async def test_write_skew_on_absent_keys_is_impossible_across_connections(
    pg: tuple[str, str],
) -> None:
    # Racer i claims slot i only if no other slot of the round is taken: exactly one may win.
    stores = await racing(pg)
    try:
        for round_ in range(50):
            slots = [f"skew:{round_:03d}:{i}" for i in range(RACERS)]

            async def claim(i: int, slots: list[str]) -> bool:
                others = [Expect(key=slot, value=None) for slot in slots if slot != slots[i]]
                return await stores[i].conditional_batch(others, [Put(key=slots[i], value=b"x")])

            results = await asyncio.gather(*(claim(i, slots) for i in range(RACERS)))
            assert results.count(True) == 1, (round_, results)
            assert len(await stores[0].scan(f"skew:{round_:03d}:")) == 1
    finally:
        await asyncio.gather(*(store.close() for store in stores))


async def test_counter_increments_across_8_connections_never_lose_an_update(
    pg: tuple[str, str],
) -> None:
    stores = await racing(pg)

    async def bump(store: PostgresStorage, times: int) -> None:
        done = 0
        while done < times:
            raw = await store.get("counter")
            new = b"%d" % ((int(raw) if raw is not None else 0) + 1)
            ops = [Put(key="counter", value=new), Put(key=f"log:{int(new):05d}", value=b"")]
            if await store.conditional_batch([Expect(key="counter", value=raw)], ops):
                done += 1

    try:
        await asyncio.gather(*(bump(store, 25) for store in stores))
        assert await stores[0].get("counter") == b"%d" % (25 * RACERS)
        assert len(await stores[0].scan("log:")) == 25 * RACERS
    finally:
        await asyncio.gather(*(store.close() for store in stores))


async def test_a_conditional_batch_is_one_round_trip_with_byte_exact_values(
    storage: PostgresStorage,
) -> None:
    await storage.batch([Put(key="k", value=b"\x00\xff"), Delete(key="nothing")])
    assert await storage.conditional_batch(
        [Expect(key="k", value=b"\x00\xff"), Expect(key="k", value=b"\x00\xff")],
        [Put(key="k", value=b"1"), Delete(key="k"), Put(key="k", value=b"2")],
    )
    assert await storage.get("k") == b"2"
    # The same key expected with two different values can never hold.
    assert not await storage.conditional_batch(
        [Expect(key="k", value=b"2"), Expect(key="k", value=None)], [Delete(key="k")]
    )
    assert await storage.get("k") == b"2"


async def test_nul_bounds_mean_just_after_a_key_as_the_engine_uses_them(
    storage: PostgresStorage,
) -> None:
    # PostgreSQL text cannot hold NUL, so "k\0" (the successor of k) never reaches SQL.
    await storage.batch([Put(key=key, value=b"") for key in ("a", "a:1", "b")])
    assert [key for key, _ in await storage.scan("", start="a\0")] == ["a:1", "b"]
    assert [key for key, _ in await storage.scan("", end="a\0")] == ["a"]
    assert [key for key, _ in await storage.scan("a", start="a\0", reverse=True)] == ["a:1"]
    assert await storage.scan("a\0") == []
    assert await storage.get("a\0") is None
    assert await storage.conditional_batch([Expect(key="a\0", value=None)], [Delete(key="b")])
    assert not await storage.conditional_batch([Expect(key="a\0", value=b"")], [])
    await storage.batch([Delete(key="never\0")])
    with pytest.raises(ValueError, match="NUL"):
        await storage.batch([Put(key="bad\0", value=b"")])
    assert [key for key, _ in await storage.scan("")] == ["a", "a:1"]


async def test_the_table_is_created_in_the_configured_schema_with_byte_order_keys(
    storage: PostgresStorage, pg: tuple[str, str]
) -> None:
    url, schema = pg
    await storage.batch([Put(key="B", value=b"1"), Put(key="a", value=b"2")])
    assert [key for key, _ in await storage.scan("")] == ["B", "a"]
    with admin(url) as conn:
        row = conn.execute(
            "SELECT c.collname FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation "
            "WHERE a.attrelid = to_regclass(format('%%I.kv', %s::text)) AND a.attname = 'key'",
            (schema,),
        ).fetchone()
    assert row == ("C",)


async def test_an_existing_table_with_another_collation_is_refused(
    pg: tuple[str, str],
) -> None:
    url, schema = pg
    with admin(url) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                'CREATE TABLE {} (key TEXT COLLATE "und-x-icu" PRIMARY KEY, value BYTEA NOT NULL)'
            ).format(sql.Identifier(schema, "kv"))
        )
    store = PostgresStorage(url, schema=schema)
    try:
        with pytest.raises(ConfigurationError, match=r'und-x-icu.*COLLATE "C"'):
            await store.get("k")
    finally:
        await store.close()


async def test_an_existing_byte_ordered_table_is_adopted(pg: tuple[str, str]) -> None:
    url, schema = pg
    with admin(url) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                'CREATE TABLE {} (key TEXT COLLATE "POSIX" PRIMARY KEY, value BYTEA NOT NULL)'
            ).format(sql.Identifier(schema, "kv"))
        )
        conn.execute(
            sql.SQL("INSERT INTO {} VALUES ('kept', 'v')").format(sql.Identifier(schema, "kv"))
        )
    store = PostgresStorage(url, schema=schema)
    try:
        assert await store.conditional_batch(
            [Expect(key="kept", value=b"v")], [Put(key="added", value=b"w")]
        )
        assert await store.scan("") == [("added", b"w"), ("kept", b"v")]
    finally:
        await store.close()


async def test_an_existing_table_that_is_not_a_kv_table_is_refused(pg: tuple[str, str]) -> None:
    url, schema = pg
    with admin(url) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TABLE {} (id INT)").format(sql.Identifier(schema, "kv")))
    store = PostgresStorage(url, schema=schema)
    try:
        with pytest.raises(ConfigurationError, match="not pyweft's"):
            await store.batch([Put(key="k", value=b"v")])
    finally:
        await store.close()


async def test_two_storages_opening_the_same_new_schema_at_once_both_work(
    pg: tuple[str, str],
) -> None:
    url, schema = pg
    stores = [PostgresStorage(url, schema=schema) for _ in range(4)]
    try:
        await asyncio.gather(
            *(s.batch([Put(key=f"k{i}", value=b"")]) for i, s in enumerate(stores))
        )
        assert len(await stores[0].scan("k")) == 4
    finally:
        await asyncio.gather(*(store.close() for store in stores))


async def test_a_real_deadlock_is_retried_inside_the_adapter(
    storage: PostgresStorage, pg: tuple[str, str]
) -> None:
    url, _ = pg
    await storage.get("warm-up")
    low, high = sorted([storage._lock_id("k1"), storage._lock_id("k2")])
    other = admin(url)
    try:
        other.execute("SET deadlock_timeout = '30s'")  # so that the batch's check fires first
        other.execute("BEGIN")
        other.execute("SELECT pg_advisory_xact_lock(%s)", (high,))
        # The batch locks `low`, then waits for `high`; the other session then
        # asks for `low` and PostgreSQL breaks the cycle by aborting one side.
        pending = asyncio.ensure_future(
            storage.conditional_batch(
                [Expect(key="k1", value=None)],
                [Put(key="k1", value=b"1"), Put(key="k2", value=b"2")],
            )
        )
        await eventually(
            lambda: waiting_for_a_lock(url, storage.application_name),
            what="the batch to wait for a lock",
        )
        # The batch's deadlock check fires first (1 s against 30 s), so PostgreSQL
        # aborts the batch, which lets this lock through; the adapter retries it.
        await asyncio.to_thread(other.execute, "SELECT pg_advisory_xact_lock(%s)", (low,))
        other.execute("COMMIT")
        assert await pending is True
    finally:
        other.close()
    assert await storage.get("k2") == b"2"


def waiting_for_a_lock(url: str, application_name: str) -> bool:
    with admin(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks JOIN pg_stat_activity USING (pid) "
            "WHERE locktype = 'advisory' AND NOT granted AND application_name = %s",
            (application_name,),
        ).fetchone()
    return bool(row and row[0])


async def test_persistent_serialization_failures_raise_storage_error_not_false(
    pg: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, schema = pg
    store = PostgresStorage(url, schema=schema, retry_attempts=3)
    calls = 0

    async def always(self: PostgresStorage, conn: object, query: bytes, *args: object) -> object:
        nonlocal calls
        calls += 1
        raise psycopg.errors.SerializationFailure("could not serialize access")

    monkeypatch.setattr(PostgresStorage, "_query", always)
    try:
        with pytest.raises(StorageError, match="could not serialize") as info:
            await store.conditional_batch([Expect(key="k", value=None)], [])
        assert isinstance(info.value.__cause__, psycopg.errors.SerializationFailure)
        assert calls == 3
    finally:
        await store.close()


async def test_connections_closed_by_the_server_while_idle_are_replaced(
    storage: PostgresStorage, pg: tuple[str, str]
) -> None:
    url, _ = pg
    await storage.batch([Put(key="k", value=b"v")])
    with admin(url) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (storage.application_name,),
        )
    await asyncio.sleep(0.05)  # let the farewell reach our idle sockets
    assert await storage.conditional_batch([Expect(key="k", value=b"v")], [Delete(key="k")])
    assert await storage.get("k") is None


def terminate_waiting_backends(url: str, application_name: str) -> None:
    with admin(url) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND wait_event_type = 'Lock'",
            (application_name,),
        )


def waiting_on_a_lock(url: str, application_name: str) -> bool:
    with admin(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE application_name = %s AND wait_event_type = 'Lock'",
            (application_name,),
        ).fetchone()
    return bool(row and row[0])


async def test_a_write_whose_connection_drops_is_an_error_with_an_unknown_outcome(
    storage: PostgresStorage, pg: tuple[str, str]
) -> None:
    url, _ = pg
    await storage.get("warm-up")
    with admin(url) as other:
        other.execute("BEGIN")
        other.execute("SELECT pg_advisory_xact_lock(%s)", (storage._lock_id("k"),))
        pending = asyncio.ensure_future(storage.batch([Put(key="k", value=b"v")]))
        await eventually(lambda: waiting_on_a_lock(url, storage.application_name), what="a wait")
        terminate_waiting_backends(url, storage.application_name)
        with pytest.raises(StorageError, match="may or may not have been applied") as info:
            await pending
        other.execute("ROLLBACK")
    assert isinstance(info.value.__cause__, psycopg.OperationalError)
    assert not isinstance(info.value, StorageClosedError)
    await storage.batch([Put(key="k", value=b"w")])  # the adapter carries on
    assert await storage.get("k") == b"w"


async def test_a_read_whose_connection_drops_is_retried(
    storage: PostgresStorage, pg: tuple[str, str]
) -> None:
    url, schema = pg
    await storage.batch([Put(key="k", value=b"v")])
    with admin(url) as other:
        other.execute("BEGIN")
        other.execute(
            sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(schema, "kv"))
        )
        pending = asyncio.ensure_future(storage.get("k"))
        await eventually(lambda: waiting_on_a_lock(url, storage.application_name), what="a wait")
        terminate_waiting_backends(url, storage.application_name)
        await asyncio.sleep(0.05)
        other.execute("ROLLBACK")
    assert await pending == b"v"


async def test_an_unreachable_server_is_a_storage_error_naming_host_and_port() -> None:
    store = PostgresStorage(
        "postgresql://app:s3cret@127.0.0.1:1/pyweft", retry_attempts=2, retry_budget_s=0.1
    )
    try:
        with pytest.raises(StorageError, match=r"127\.0\.0\.1:1/pyweft") as info:
            await store.get("k")
        assert "s3cret" not in str(info.value)
        assert isinstance(info.value.__cause__, psycopg.OperationalError)
    finally:
        await store.close()
    with pytest.raises(StorageClosedError):
        await store.get("k")


async def test_calls_after_close_raise_even_if_the_store_was_never_used(
    pg: tuple[str, str],
) -> None:
    url, schema = pg
    store = PostgresStorage(url, schema=schema)
    await store.close()
    with pytest.raises(StorageClosedError):
        await store.batch([Put(key="k", value=b"v")])


@pytest.mark.parametrize("schema", ["Public", "my-schema", "a.b", "x; DROP TABLE kv", "", "pg_x"])
def test_schema_names_must_be_plain_identifiers(schema: str) -> None:
    with pytest.raises(ConfigurationError, match="schema"):
        PostgresStorage("postgresql://localhost/db", schema=schema)


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
async def test_urls_open_postgres_storage_with_the_schema_option(
    pg: tuple[str, str], scheme: str
) -> None:
    url, schema = pg
    store = open_storage(with_schema(url, schema).replace("postgresql://", f"{scheme}://", 1))
    try:
        assert isinstance(store, PostgresStorage)
        assert store.schema == schema
        assert store.capabilities.persistence == "remote"
        assert store.capabilities.durable_commit is True
        await store.batch([Put(key="k", value=b"v")])
    finally:
        await store.close()
    with admin(url) as conn:
        count = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, "kv"))
        ).fetchone()
    assert count == (1,)


def test_url_options_other_than_schema_go_to_libpq() -> None:
    store = open_storage("postgresql://u:pw@db.example:6543/app?sslmode=disable&schema=runs")
    assert isinstance(store, PostgresStorage)
    assert store.schema == "runs"
    assert "pw" not in repr(store)
    assert "db.example:6543/app" in repr(store)
    with pytest.raises(ConfigurationError, match="nonsense") as info:
        open_storage("postgresql://u:pw@db/app?nonsense=1")
    assert ":pw@" not in str(info.value)
    with pytest.raises(ConfigurationError, match="postgresql://u:\\*\\*\\*@db/app"):
        open_storage("postgresql+psycopg://u:pw@db/app")


# --- group commit -------------------------------------------------------------------------


async def queue_behind_a_locked_write(
    url: str, store: PostgresStorage, other: psycopg.Connection[tuple[object, ...]]
) -> asyncio.Future[None]:
    """Occupy ``store``'s only write slot with a batch stuck on a lock ``other`` holds."""
    other.execute("BEGIN")
    other.execute("SELECT pg_advisory_xact_lock(%s)", (store._lock_id("gate"),))
    stuck = asyncio.ensure_future(store.batch([Put(key="gate", value=b"open")]))
    await eventually(lambda: waiting_on_a_lock(url, store.application_name), what="a wait")
    return stuck


@pytest.fixture
async def one_slot(pg: tuple[str, str]) -> AsyncIterator[PostgresStorage]:
    """A store with a single write slot, so a stuck write makes the others queue."""
    url, schema = pg
    store = PostgresStorage(url, schema=schema, max_inflight_writes=1)
    try:
        await store.get("warm-up")
        yield store
    finally:
        await store.close()


async def test_batches_queued_together_commit_as_one_group_each_on_its_own_conditions(
    pg: tuple[str, str], one_slot: PostgresStorage
) -> None:
    url, store = pg[0], one_slot
    await store.batch([Put(key="taken", value=b"old")])
    with admin(url) as other:
        stuck = await queue_behind_a_locked_write(url, store, other)
        sent_before = store._writes.groups_sent
        calls = [
            # In submission order; each sees what the earlier ones of its group wrote.
            store.conditional_batch([Expect(key="x", value=None)], [Put(key="x", value=b"1")]),
            store.conditional_batch([Expect(key="x", value=None)], [Put(key="x", value=b"2")]),
            store.conditional_batch([Expect(key="x", value=b"1")], [Put(key="y", value=b"y")]),
            store.conditional_batch([Expect(key="taken", value=None)], [Delete(key="y")]),
            store.conditional_batch([], [Delete(key="taken"), Put(key="z", value=b"")]),
        ]
        pending = asyncio.gather(*calls)
        await asyncio.sleep(0.05)
        assert not pending.done()
        other.execute("ROLLBACK")
        assert await pending == [True, False, True, False, True]
        await stuck
    assert store._writes.groups_sent == sent_before + 1  # one round trip for all five
    assert await store.scan("") == [("gate", b"open"), ("x", b"1"), ("y", b"y"), ("z", b"")]


async def test_a_group_whose_connection_drops_fails_every_batch_in_it_as_unknown(
    pg: tuple[str, str], one_slot: PostgresStorage
) -> None:
    url, store = pg[0], one_slot
    with admin(url) as other:
        stuck = await queue_behind_a_locked_write(url, store, other)
        # Queued behind the stuck batch, then sent as one group that waits on the
        # same lock, so the second kill hits all three at once.
        group = asyncio.gather(
            *(
                store.batch([Put(key=f"k{i}", value=b""), Put(key="gate", value=b"")])
                for i in range(3)
            ),
            return_exceptions=True,
        )
        await asyncio.sleep(0.05)
        sent_before = store._writes.groups_sent
        terminate_waiting_backends(url, store.application_name)
        with pytest.raises(StorageError, match="may or may not have been applied"):
            await stuck
        await eventually(lambda: waiting_on_a_lock(url, store.application_name), what="group")
        terminate_waiting_backends(url, store.application_name)
        outcomes = await group
        other.execute("ROLLBACK")
    assert store._writes.groups_sent == sent_before + 1
    assert len(outcomes) == 3
    for outcome in outcomes:
        assert isinstance(outcome, StorageError), outcome
        assert "may or may not have been applied" in str(outcome)
    assert await store.scan("k") == []
    await store.batch([Put(key="after", value=b"")])  # the adapter carries on


async def test_a_set_wise_group_whose_connection_drops_fails_every_batch_as_unknown(
    pg: tuple[str, str], one_slot: PostgresStorage
) -> None:
    """The same for a group of batches that share no key (pyweft_write_disjoint_v1)."""
    url, store = pg[0], one_slot
    with admin(url) as other:
        stuck = await queue_behind_a_locked_write(url, store, other)
        other.execute("SELECT pg_advisory_xact_lock(%s)", (store._lock_id("k0"),))
        group = asyncio.gather(
            *(store.batch([Put(key=f"k{i}", value=b"")]) for i in range(3)),
            return_exceptions=True,
        )
        await asyncio.sleep(0.05)
        sent_before = store._writes.groups_sent
        terminate_waiting_backends(url, store.application_name)
        with pytest.raises(StorageError, match="may or may not have been applied"):
            await stuck
        await eventually(lambda: waiting_on_a_lock(url, store.application_name), what="group")
        terminate_waiting_backends(url, store.application_name)
        outcomes = await group
        other.execute("ROLLBACK")
    assert store._writes.groups_sent == sent_before + 1
    for outcome in outcomes:
        assert isinstance(outcome, StorageError), outcome
        assert "may or may not have been applied" in str(outcome)
    assert await store.scan("k") == []


async def test_a_caller_cancelled_while_its_batch_is_queued_writes_nothing(
    pg: tuple[str, str], one_slot: PostgresStorage
) -> None:
    url, store = pg[0], one_slot
    with admin(url) as other:
        stuck = await queue_behind_a_locked_write(url, store, other)
        dropped = asyncio.ensure_future(store.batch([Put(key="dropped", value=b"")]))
        kept = asyncio.ensure_future(store.batch([Put(key="kept", value=b"")]))
        await asyncio.sleep(0.01)
        dropped.cancel()
        other.execute("ROLLBACK")
        await stuck
        await kept
    assert dropped.cancelled()
    assert await store.get("dropped") is None
    assert await store.get("kept") == b""


def test_max_inflight_writes_must_fit_the_pool() -> None:
    with pytest.raises(ConfigurationError, match="max_inflight_writes"):
        PostgresStorage(
            "postgresql://nobody@127.0.0.1/none", max_connections=2, max_inflight_writes=3
        )
    with pytest.raises(ConfigurationError, match="max_inflight_writes"):
        PostgresStorage("postgresql://nobody@127.0.0.1/none", max_inflight_writes=0)


async def test_reads_queued_together_go_in_one_statement_and_each_gets_its_own_key(
    pg: tuple[str, str],
) -> None:
    url, schema = pg
    store = PostgresStorage(url, schema=schema, max_connections=1)
    try:
        await store.batch([Put(key=f"k{i}", value=b"%d" % i) for i in range(5)])
        with admin(url) as other:
            other.execute("BEGIN")
            other.execute(
                sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                    sql.Identifier(schema, "kv")
                )
            )
            first = asyncio.ensure_future(store.get("k0"))
            await eventually(lambda: waiting_on_a_lock(url, store.application_name), what="wait")
            sent_before = store._reads.groups_sent
            wanted = ["k3", "missing", "k1", "k3", "k4"]
            queued = asyncio.gather(*(store.get(key) for key in wanted))
            await asyncio.sleep(0.05)
            other.execute("ROLLBACK")
            assert await first == b"0"
            assert await queued == [b"3", None, b"1", b"3", b"4"]
        assert store._reads.groups_sent == sent_before + 1
    finally:
        await store.close()


async def test_grouped_increments_from_many_tasks_and_stores_never_lose_an_update(
    pg: tuple[str, str],
) -> None:
    # Many tasks per store, so their CAS batches share groups (often on the same
    # counter: the first in a group wins, the rest see its write and retry), plus a
    # second store racing them from other connections.
    url, schema = pg
    stores = [PostgresStorage(url, schema=schema) for _ in range(2)]
    counters = ["c0", "c1", "c2"]

    async def bump(store: PostgresStorage, key: str, times: int) -> int:
        done = tries = 0
        while done < times:
            tries += 1
            raw = await store.get(key)
            new = b"%d" % ((int(raw) if raw is not None else 0) + 1)
            if await store.conditional_batch(
                [Expect(key=key, value=raw)], [Put(key=key, value=new)]
            ):
                done += 1
        return tries

    try:
        jobs = [
            bump(store, counters[i % 3], 10) for store in stores for i in range(24)
        ]  # 48 tasks x 10 increments, 16 tasks per counter
        tries = await asyncio.gather(*jobs)
        for key in counters:
            assert await stores[0].get(key) == b"160", key
        assert sum(tries) > 480  # there was contention: some CAS lost and retried
        # ...and batches shared groups: store 0 sent fewer groups than it had batches.
        assert stores[0]._writes.groups_sent < sum(tries[:24])
    finally:
        await asyncio.gather(*(store.close() for store in stores))
