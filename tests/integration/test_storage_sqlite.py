from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pyweft.errors import ConfigurationError, StorageError
from pyweft.storage import Delete, Expect, Put, SQLiteStorage, Storage
from pyweft.testing import StorageConformance

# Short, so that a test holding the write lock turns into a StorageError quickly.
FAST_FAIL_BUSY_TIMEOUT_S = 0.05


def hold_write_lock(path: str | Path) -> sqlite3.Connection:
    """A second connection holding SQLite's write lock until it rolls back."""
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    return locker


def release(locker: sqlite3.Connection) -> None:
    locker.rollback()
    locker.close()


class SQLiteConformance(StorageConformance):
    synchronous = "FULL"
    _locker: sqlite3.Connection | None = None

    async def make_storage(self, tmp_path: Path) -> Storage:
        return SQLiteStorage(
            tmp_path / "kv.db",
            synchronous=self.synchronous,
            busy_timeout_s=FAST_FAIL_BUSY_TIMEOUT_S,
        )

    async def reopen_storage(self, tmp_path: Path) -> Storage | None:
        return await self.make_storage(tmp_path)

    async def break_storage(self, storage: Storage) -> bool:
        assert isinstance(storage, SQLiteStorage)
        self._locker = hold_write_lock(storage.path)
        return True

    async def repair_storage(self, storage: Storage) -> None:
        if self._locker is not None:
            release(self._locker)
            self._locker = None


class TestSQLiteFullConformance(SQLiteConformance):
    synchronous = "FULL"


class TestSQLiteNormalConformance(SQLiteConformance):
    synchronous = "NORMAL"


@pytest.fixture
async def db_path(tmp_path: Path) -> Path:
    return tmp_path / "kv.db"


@pytest.fixture
async def storage(db_path: Path) -> AsyncIterator[SQLiteStorage]:
    store = SQLiteStorage(db_path)
    try:
        yield store
    finally:
        await store.close()


async def test_group_commit_mixes_failed_and_applied_conditions_in_one_transaction(
    storage: SQLiteStorage, db_path: Path
) -> None:
    await storage.batch([Put(key=f"slot:{i:03d}", value=b"0") for i in range(100)])
    # Hold the write lock so every batch queues up behind it, then let them all go.
    locker = hold_write_lock(db_path)
    commits_before = storage._transactions
    pending = [
        asyncio.ensure_future(
            storage.conditional_batch(
                [Expect(key=f"slot:{i:03d}", value=b"0" if i % 2 == 0 else b"stale")],
                [Put(key=f"slot:{i:03d}", value=b"1"), Put(key=f"log:{i:03d}", value=b"x")],
            )
        )
        for i in range(100)
    ]
    await asyncio.sleep(0)  # let every batch reach the writer's queue
    release(locker)
    results = await asyncio.gather(*pending)

    assert results == [i % 2 == 0 for i in range(100)]
    assert storage._transactions - commits_before <= 3, "the batches were not grouped"
    slots = dict(await storage.scan("slot:"))
    assert [slots[f"slot:{i:03d}"] for i in range(100)] == [
        b"1" if i % 2 == 0 else b"0" for i in range(100)
    ]
    assert [key for key, _ in await storage.scan("log:")] == [
        f"log:{i:03d}" for i in range(0, 100, 2)
    ]


async def test_batches_in_one_group_see_the_effects_of_earlier_ones(
    storage: SQLiteStorage,
) -> None:
    async def bump(previous: bytes | None, new: bytes) -> bool:
        return await storage.conditional_batch(
            [Expect(key="chain", value=previous)], [Put(key="chain", value=new)]
        )

    chain = [None, *(b"%d" % i for i in range(50))]
    results = await asyncio.gather(*(bump(chain[i], b"%d" % i) for i in range(50)))
    assert all(results)
    assert await storage.get("chain") == b"49"


async def test_a_failing_group_fails_every_batch_in_it(db_path: Path) -> None:
    storage = SQLiteStorage(db_path, busy_timeout_s=FAST_FAIL_BUSY_TIMEOUT_S)
    try:
        locker = hold_write_lock(db_path)
        try:
            outcomes = await asyncio.gather(
                *(storage.batch([Put(key=f"plain:{i}", value=b"x")]) for i in range(20)),
                *(
                    storage.conditional_batch(
                        [Expect(key=f"cas:{i}", value=None)], [Put(key=f"cas:{i}", value=b"y")]
                    )
                    for i in range(20)
                ),
                return_exceptions=True,
            )
        finally:
            release(locker)
        assert all(isinstance(outcome, StorageError) for outcome in outcomes), outcomes
        assert all(isinstance(outcome.__cause__, sqlite3.Error) for outcome in outcomes)  # type: ignore[union-attr]
        assert "locked" in str(outcomes[0])
        assert await storage.scan("") == []
    finally:
        await storage.close()


async def test_the_event_loop_keeps_running_while_a_commit_waits_on_a_lock(
    storage: SQLiteStorage, db_path: Path
) -> None:
    locker = hold_write_lock(db_path)
    try:
        committing = asyncio.ensure_future(storage.batch([Put(key="k", value=b"v")]))
        ticks = 0
        while ticks < 200:
            await asyncio.sleep(0)
            ticks += 1
        assert not committing.done(), "the commit should still be waiting for the lock"
    finally:
        release(locker)
    await committing
    assert await storage.get("k") == b"v"


async def test_a_ticker_keeps_ticking_while_2000_batches_commit(storage: SQLiteStorage) -> None:
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0.001)

    async def commit_all() -> None:
        for i in range(2000):
            await storage.batch([Put(key=f"t:{i:05d}", value=b"x")])
        done.set()

    await asyncio.gather(ticker(), commit_all())
    assert ticks > 0
    assert len(await storage.scan("t:")) == 2000


async def test_close_finishes_batches_already_queued(db_path: Path) -> None:
    storage = SQLiteStorage(db_path, synchronous="NORMAL")
    pending = [
        asyncio.ensure_future(storage.batch([Put(key=f"q:{i:03d}", value=b"x")]))
        for i in range(100)
    ]
    await asyncio.sleep(0)
    await storage.close()
    await asyncio.gather(*pending)
    reopened = SQLiteStorage(db_path)
    try:
        assert len(await reopened.scan("q:")) == 100
    finally:
        await reopened.close()


async def test_concurrent_close_calls_all_wait_for_the_shutdown(storage: SQLiteStorage) -> None:
    await asyncio.gather(storage.close(), storage.close(), storage.close())


async def test_database_file_uses_wal_and_a_single_kv_table(
    storage: SQLiteStorage, db_path: Path
) -> None:
    await storage.batch([Put(key="k", value=b"v"), Delete(key="nothing")])
    await storage.close()
    with sqlite3.connect(db_path) as conn:
        (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        rows = conn.execute("SELECT key, typeof(key), value FROM kv").fetchall()
    conn.close()
    assert mode == "wal"
    assert tables == [("kv",)]
    assert rows == [("k", "text", b"v")]


async def test_capabilities_follow_the_synchronous_mode(db_path: Path) -> None:
    full = SQLiteStorage(db_path, synchronous="FULL")
    normal = SQLiteStorage(db_path, synchronous="normal")
    try:
        assert full.capabilities.persistence == "local"
        assert full.capabilities.durable_commit is True
        assert normal.synchronous == "NORMAL"
        assert normal.capabilities.durable_commit is False
    finally:
        await full.close()
        await normal.close()


def test_an_invalid_synchronous_value_names_the_allowed_values(db_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="OFF") as info:
        SQLiteStorage(db_path, synchronous="OFF")
    assert "FULL" in str(info.value)
    assert "NORMAL" in str(info.value)
    assert not db_path.exists()


def test_a_missing_directory_is_a_configuration_error(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    with pytest.raises(ConfigurationError, match="does not exist") as info:
        SQLiteStorage(missing / "kv.db")
    assert str(missing) in str(info.value)
    assert not missing.exists()


@pytest.mark.parametrize("path", [":memory:", ""])
def test_an_in_memory_sqlite_path_points_to_memory_storage(path: str) -> None:
    with pytest.raises(ConfigurationError, match="memory://"):
        SQLiteStorage(path)


def test_a_file_that_is_not_a_database_is_a_storage_error(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"this is not a SQLite database" * 100)
    with pytest.raises(StorageError, match=r"bogus\.db") as info:
        SQLiteStorage(bogus)
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


async def test_malformed_ops_are_rejected_before_they_reach_the_writer(
    storage: SQLiteStorage,
) -> None:
    with pytest.raises(TypeError, match="bytes"):
        await storage.batch([Put(key="k", value="text")])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="UTF-8"):
        await storage.batch([Put(key="bad\ud800", value=b"x")])
    with pytest.raises(ValueError, match="limit"):
        await storage.scan("", limit=-1)
    assert await storage.scan("") == []


# --- another application's database, read-only opens, read-only files -----------------


def other_app_db(path: Path, *, kv: bool = False) -> None:
    """A database some other program made: its own tables, rollback journal (not WAL)."""
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers (name) VALUES ('Ada')")
        if kv:
            conn.execute("CREATE TABLE kv (k INTEGER, v INTEGER)")
    conn.close()


def shape(path: Path) -> tuple[str, list[str]]:
    with sqlite3.connect(path) as conn:
        (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master ORDER BY name")]
    conn.close()
    return str(mode), names


def test_another_applications_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    db = tmp_path / "crm.db"
    other_app_db(db)
    before = db.read_bytes()
    with pytest.raises(ConfigurationError, match="not pyweft's") as info:
        SQLiteStorage(db)
    assert "table customers" in str(info.value)
    assert "allow_foreign_tables" in str(info.value)
    assert shape(db) == ("delete", ["customers"])  # no kv table, no switch to WAL
    assert db.read_bytes() == before


def test_a_foreign_kv_table_is_a_configuration_error_not_a_type_error(tmp_path: Path) -> None:
    db = tmp_path / "crm.db"
    other_app_db(db, kv=True)
    with pytest.raises(ConfigurationError, match="not pyweft's"):
        SQLiteStorage(db)
    with pytest.raises(ConfigurationError, match="table named kv that is not pyweft's"):
        SQLiteStorage(db, allow_foreign_tables=True)
    assert shape(db) == ("delete", ["customers", "kv"])


async def test_sharing_a_file_with_other_tables_works_when_allowed(tmp_path: Path) -> None:
    from pyweft.storage import open_storage

    db = tmp_path / "crm.db"
    other_app_db(db)
    storage = open_storage(f"sqlite:///{db}?allow_foreign_tables=1")
    try:
        await storage.batch([Put(key="k", value=b"v")])
        assert await storage.get("k") == b"v"
    finally:
        await storage.close()
    assert shape(db) == ("wal", ["customers", "kv"])


def test_a_missing_file_is_not_created_by_a_read_only_or_no_create_open(tmp_path: Path) -> None:
    typo = tmp_path / "tpyo.db"
    for kwargs in ({"read_only": True}, {"create": False}):
        with pytest.raises(ConfigurationError, match="there is no SQLite database at"):
            SQLiteStorage(typo, **kwargs)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


async def test_a_read_only_open_reads_and_refuses_writes(db_path: Path) -> None:
    writer = SQLiteStorage(db_path)
    await writer.batch([Put(key="k", value=b"v")])
    await writer.close()
    before = file_bytes(db_path)
    reader = SQLiteStorage(db_path, read_only=True)
    try:
        assert reader.read_only
        assert await reader.get("k") == b"v"
        with pytest.raises(StorageError, match="read-only"):
            await reader.batch([Put(key="k", value=b"changed")])
    finally:
        await reader.close()
    assert file_bytes(db_path) == before


def test_a_read_only_open_of_a_database_without_a_store_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with pytest.raises(ConfigurationError, match="holds no pyweft store"):
        SQLiteStorage(empty, read_only=True)


def remount_read_only(mount: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)


def file_bytes(path: Path) -> bytes:
    return path.read_bytes()


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "mnt"
    mount.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "tmpfs", str(mount)], capture_output=True
    ).returncode:
        pytest.skip(
            "mounting a tmpfs is not permitted here (needs root): cannot make a read-only fs"
        )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


async def test_a_store_on_a_read_only_filesystem_says_read_only(read_only_mount: Path) -> None:
    db = read_only_mount / "app.db"
    storage = SQLiteStorage(db)
    await storage.batch([Put(key="k", value=b"v")])
    await storage.close()
    remount_read_only(read_only_mount)
    with pytest.raises(StorageError, match="read-only filesystem") as info:
        SQLiteStorage(db)
    assert "unable to open" not in str(info.value).split("(")[0]
    reader = SQLiteStorage(db, read_only=True)  # inspection still works
    try:
        assert await reader.get("k") == b"v"
    finally:
        await reader.close()


def crash_with_a_write(db: Path) -> None:
    """A process writes to ``db`` and dies without closing it, leaving -wal and -shm."""
    program = (
        "import asyncio, os, sys\n"
        "from pyweft.storage.base import Put\n"
        "from pyweft.storage.sqlite import SQLiteStorage\n"
        "async def main():\n"
        "    storage = SQLiteStorage(sys.argv[1])\n"
        "    await storage.batch([Put(key='k', value=b'v')])\n"
        "    os._exit(0)\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", program, str(db)], check=True)


async def test_a_crashed_store_on_a_read_only_filesystem_says_read_only(
    read_only_mount: Path,
) -> None:
    # With the -wal and -shm files a crash leaves, SQLite opens a file on a read-only
    # filesystem without complaint, so the open has to look at the filesystem itself.
    db = read_only_mount / "app.db"
    crash_with_a_write(db)
    assert (read_only_mount / "app.db-wal").exists()
    assert (read_only_mount / "app.db-shm").exists()
    remount_read_only(read_only_mount)
    with pytest.raises(StorageError, match="read-only filesystem"):
        SQLiteStorage(db)
    reader = SQLiteStorage(db, read_only=True)
    try:
        assert await reader.get("k") == b"v"
    finally:
        await reader.close()


async def test_a_closed_store_is_one_file_with_no_wal_left_beside_it(tmp_path: Path) -> None:
    # Both connections closing at once used to leave app.db-wal now and then (about one
    # close in fifteen), holding the newest commits, so a copy of app.db alone missed them.
    for i in range(100):
        db = tmp_path / f"app{i}.db"
        storage = SQLiteStorage(db)
        await storage.batch([Put(key="k", value=b"v")])
        assert await storage.get("k") == b"v"
        await storage.close()
        assert not (tmp_path / f"app{i}.db-wal").exists(), f"close {i} left the WAL"
