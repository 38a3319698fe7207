"""The embedded default store: one SQLite file in WAL mode, driven from two threads.

The stdlib driver blocks, so no SQLite call ever runs on the event loop.
A single writer thread owns the write connection and coalesces every batch
queued while it was busy into one transaction (group commit): concurrent
runs then share one fsync instead of paying one each, and a lone
sequential caller pays exactly one. A reader thread with its own connection
serves ``get`` and ``scan``; WAL lets it read while the writer commits, so
reads never wait behind an fsync.

The threads, their job queues and the delivery of results back to the event
loop are in ``sqlite_threads.py``; this module holds the SQL, the connections
and what each thread runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pyweft.errors import ConfigurationError, StorageClosedError, StorageError
from pyweft.storage.base import (
    Delete,
    Expect,
    Get,
    Op,
    Put,
    Read,
    ReadResult,
    StorageCapabilities,
    prefix_end,
)
from pyweft.storage.sqlite_threads import J, ReadJob, ReadManyJob, Worker, WriteJob

# --- SQL: every statement this adapter runs ------------------------------------

_SQL_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID"
)
_SQL_GET = "SELECT value FROM kv WHERE key = ?"
_SQL_COUNT_RANGE = "SELECT count(*) FROM kv WHERE key >= ? AND key < ?"
_SQL_COUNT_FROM = "SELECT count(*) FROM kv WHERE key >= ?"
# One row (one step of the statement) for all the keys, however many are found.
_SQL_GET_IN = "SELECT json_group_object(key, hex(value)) FROM kv WHERE key IN ({})"
_SQL_DELETE_IN = "DELETE FROM kv WHERE key IN ({})"
_SQL_PUT_VALUES = "INSERT OR REPLACE INTO kv (key, value) VALUES {}"
_SQL_READ_MANY = "SELECT {}"
_SQL_GET_COLUMN = "(SELECT value FROM kv WHERE key = ?)"
_SQL_SCAN_COLUMN = "(SELECT json_group_array(json_array(key, hex(value))) FROM ({}))"
_CHUNK = 250  # keys per multi-row statement (SQLite allows 32,766 bound parameters)
_SQL_BEGIN = "BEGIN IMMEDIATE"
_SQL_COMMIT = "COMMIT"
# Keyed by (has upper bound, reverse). LIMIT -1 means "no limit" in SQLite.
_SQL_SCAN = {
    (False, False): "SELECT key, value FROM kv WHERE key >= ? ORDER BY key LIMIT ?",
    (False, True): "SELECT key, value FROM kv WHERE key >= ? ORDER BY key DESC LIMIT ?",
    (True, False): "SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key LIMIT ?",
    (True, True): (
        "SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key DESC LIMIT ?"
    ),
}
_SQL_OBJECTS = "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite!_%' ESCAPE '!'"
_SQL_KV_COLUMNS = "PRAGMA table_info(kv)"
_SQL_JOURNAL_WAL = "PRAGMA journal_mode=WAL"
_SQL_SYNCHRONOUS = {
    "FULL": "PRAGMA synchronous=FULL",
    "NORMAL": "PRAGMA synchronous=NORMAL",
}
# No mmap_size on purpose: with memory-mapped I/O a failing disk surfaces as
# SIGBUS and kills the process instead of raising an error we can report.
_SQL_COMMON_PRAGMAS = (
    "PRAGMA cache_size=-16384",  # 16 MiB of page cache per connection
    "PRAGMA temp_store=MEMORY",
)
_SQL_WRITER_PRAGMAS = ("PRAGMA journal_size_limit=67108864",)  # truncate the WAL to 64 MiB
_SQL_READER_PRAGMAS = ("PRAGMA query_only=ON",)

SYNCHRONOUS_MODES = tuple(_SQL_SYNCHRONOUS)


@functools.lru_cache(maxsize=2 * _CHUNK + 2)
def _sql_in(template: str, n: int) -> str:
    return template.format(",".join("?" * n))


@functools.lru_cache(maxsize=_CHUNK + 1)
def _sql_values(n: int) -> str:
    return _SQL_PUT_VALUES.format(",".join(("(?,?)",) * n))


# --- the adapter -------------------------------------------------------------------


class SQLiteStorage:
    """The :class:`~pyweft.storage.base.Storage` protocol on one SQLite file.

    ``synchronous="FULL"`` (the default) fsyncs the WAL on every commit, so a
    batch that returned survives power loss. ``"NORMAL"`` survives a process
    crash but may lose the last commits on power loss, and is much faster.
    ``busy_timeout_s`` bounds how long a commit waits for a lock held by
    another process before raising :class:`~pyweft.errors.StorageError`.

    The file must be pyweft's own: a database that holds other tables (another
    application's) is refused with :class:`~pyweft.errors.ConfigurationError`
    before anything in it changes, unless ``allow_foreign_tables=True``.
    ``create=False`` refuses a missing file instead of creating it;
    ``read_only=True`` also never writes (no WAL switch, no table; writes raise
    :class:`~pyweft.errors.StorageError`), for tools that only look.

    Cancelling a caller does not withdraw a batch already handed to the
    writer thread: treat its outcome as unknown, as with any remote store.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout_s: float = 5.0,
        create: bool = True,
        read_only: bool = False,
        allow_foreign_tables: bool = False,
    ) -> None:
        mode = str(synchronous).upper()
        if mode not in _SQL_SYNCHRONOUS:
            raise ConfigurationError(
                f"SQLite synchronous={synchronous!r} is not supported; "
                f"use one of {', '.join(SYNCHRONOUS_MODES)}"
            )
        if busy_timeout_s < 0:
            raise ConfigurationError(f"busy_timeout_s must be >= 0, got {busy_timeout_s}")
        self._path = os.fspath(path)
        _check_path(self._path)
        if (read_only or not create) and not os.path.exists(self._path):
            raise ConfigurationError(
                f"there is no SQLite database at {self._path!r}; check the path (this "
                f"{'read-only ' if read_only else ''}open never creates a store)"
            )
        self._read_only = read_only
        self._created = not read_only and not os.path.exists(self._path)
        self._allow_foreign = allow_foreign_tables
        self._synchronous: str = mode
        self._busy_timeout_s = busy_timeout_s
        self._capabilities = StorageCapabilities(
            persistence="local", durable_commit=(mode == "FULL")
        )
        self._closed = False
        self._close_task: asyncio.Future[None] | None = None
        self._transactions = 0  # committed by the writer; lets tests observe grouping
        # The writer goes first: it checks the file is ours, switches it to WAL and creates
        # the table. A read-only store has no writer at all.
        self._writer: Worker[WriteJob] | None = None
        if not read_only:
            self._writer = self._start_worker(
                "pyweft-sqlite-writer", self._connect_writer, self._run_writes
            )
        try:
            self._reader: Worker[ReadJob] = self._start_worker(
                "pyweft-sqlite-reader", self._connect_reader, self._run_reads
            )
        except BaseException:
            if self._writer is not None:
                self._writer.stop(None)
                self._writer.join()
            raise

    @property
    def capabilities(self) -> StorageCapabilities:
        return self._capabilities

    @property
    def path(self) -> str:
        """The database file this adapter writes to."""
        return self._path

    @property
    def created(self) -> bool:
        """True when this open created the file (there was no database at the path)."""
        return self._created

    @property
    def read_only(self) -> bool:
        """True when opened with ``read_only=True``: reads only, writes raise."""
        return self._read_only

    @property
    def synchronous(self) -> str:
        """``"FULL"`` or ``"NORMAL"``."""
        return self._synchronous

    def __repr__(self) -> str:
        return f"SQLiteStorage({self._path!r}, synchronous={self._synchronous!r})"

    # --- protocol -------------------------------------------------------------------

    async def count(self, prefix: str) -> int:
        """How many keys start with ``prefix`` (optional protocol extension)."""
        _check_key(prefix)
        upper = prefix_end(prefix)
        if upper is None:
            result: int = await self._read(_SQL_COUNT_FROM, (prefix,), True)
        else:
            result = await self._read(_SQL_COUNT_RANGE, (prefix, upper), True)
        return result

    async def get(self, key: str) -> bytes | None:
        _check_key(key)
        result: bytes | None = await self._read(_SQL_GET, (key,), True)
        return result

    async def scan(
        self,
        prefix: str,
        *,
        start: str | None = None,
        end: str | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> list[tuple[str, bytes]]:
        query = _scan_query(prefix, start, end, limit, reverse)
        if query is None:
            self._raise_if_closed()
            return []
        rows: list[tuple[str, bytes]] = await self._read(query[0], query[1], False)
        return rows

    async def read_many(self, reads: Sequence[Read]) -> list[ReadResult]:
        """Every read in one statement, handed to the reader thread at once (optional
        protocol extension). One statement of one row: SQLite hands the GIL back to the
        event loop at each step of a statement, and the loop pays for every hand-off."""
        columns: list[str] = []
        params: list[object] = []
        shapes: list[bool | None] = []
        empty: set[int] = set()  # scans with limit 0: nothing to ask the database
        for i, read in enumerate(reads):
            if isinstance(read, Get):
                _check_key(read.key)
                columns.append(_SQL_GET_COLUMN)
                params.append(read.key)
                shapes.append(None)
                continue
            query = _scan_query(read.prefix, read.start, read.end, read.limit, read.reverse)
            if query is None:
                empty.add(i)
                continue
            columns.append(_SQL_SCAN_COLUMN.format(query[0]))
            params += query[1]
            shapes.append(read.reverse)
        self._raise_if_closed()
        if not columns:
            return [[] for _ in reads]
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        sql = _SQL_READ_MANY.format(", ".join(columns))
        self._reader.submit(ReadManyJob(sql, tuple(params), tuple(shapes), future, loop))
        found: list[ReadResult] = await future
        if empty:
            rest = iter(found)
            return [[] if i in empty else next(rest) for i in range(len(reads))]
        return found

    async def batch(self, ops: Sequence[Op]) -> None:
        await self._write((), ops)

    async def conditional_batch(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> bool:
        for condition in conditions:
            _check_key(condition.key)
        return await self._write(conditions, ops)

    async def close(self) -> None:
        """Finish queued work, stop both threads and close both connections."""
        if self._close_task is None:
            self._closed = True
            self._close_task = asyncio.ensure_future(self._shutdown())
        await asyncio.shield(self._close_task)

    # --- event-loop side ------------------------------------------------------------

    async def _read(self, sql: str, params: tuple[object, ...], single: bool) -> Any:
        self._raise_if_closed()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._reader.submit(ReadJob(sql, params, single, future, loop))
        return await future

    async def _write(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> bool:
        # Copy, so a caller mutating its list while the batch waits in the queue
        # cannot change it; validate here, because a malformed op reaching the
        # writer would fail every other batch of its group along with its own.
        conditions, ops = tuple(conditions), tuple(ops)
        _check_ops(ops)
        self._raise_if_closed()
        if self._writer is None:
            raise StorageError(
                f"SQLiteStorage for {self._path} was opened read-only; nothing was written"
            )
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._writer.submit(WriteJob(conditions, ops, future, loop))
        result: bool = await future
        return result

    async def _shutdown(self) -> None:
        # One after the other, the writer last: SQLite folds the WAL back into the file
        # and deletes it only when the last connection closes, and two closing at once
        # can each see the other still open and both leave it (app.db-wal then holds
        # the newest commits, and a copy of app.db alone would miss them).
        loop = asyncio.get_running_loop()
        for worker in (self._reader, self._writer):
            if worker is not None:
                stopped = worker.stop(loop)
                if stopped is not None:
                    await stopped
                worker.join()

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise StorageClosedError(
                f"SQLiteStorage for {self._path} is closed; open a new storage to continue"
            )

    # --- worker-thread side ---------------------------------------------------------

    def _start_worker(
        self,
        name: str,
        connect: Callable[[], sqlite3.Connection],
        run_group: Callable[[sqlite3.Connection, list[J]], list[object]],
    ) -> Worker[J]:
        try:
            return Worker(name, connect, run_group, self._closed_error)
        except sqlite3.Error as exc:
            why = "" if self._read_only else _read_only_reason(self._path)
            if why:
                raise StorageError(
                    f"could not open SQLite database {self._path}: {why}, so pyweft cannot "
                    "write to it. Make it writable, or use a read-only open for inspection "
                    f"(SQLiteStorage(..., read_only=True)). ({exc})"
                ) from exc
            raise StorageError(f"could not open SQLite database {self._path}: {exc}") from exc

    def _closed_error(self) -> StorageClosedError:
        return StorageClosedError(f"SQLiteStorage for {self._path} was closed")

    def _connect(self, pragmas: Sequence[str]) -> sqlite3.Connection:
        if self._read_only:
            conn = self._connect_read_only()
        else:
            conn = sqlite3.connect(
                self._path,
                timeout=self._busy_timeout_s,
                isolation_level=None,
                cached_statements=32,
            )
        try:
            for pragma in pragmas:
                conn.execute(pragma)
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect_read_only(self) -> sqlite3.Connection:
        base = Path(os.path.abspath(self._path)).as_uri()

        def connect(options: str) -> sqlite3.Connection:
            return sqlite3.connect(
                f"{base}?{options}",
                timeout=self._busy_timeout_s,
                isolation_level=None,
                cached_statements=32,
                uri=True,
            )

        conn = connect("mode=ro")
        try:
            conn.execute(_SQL_OBJECTS).fetchall()  # WAL files are opened on first read
            return conn
        except sqlite3.OperationalError:
            conn.close()
            if not _on_read_only_filesystem(self._path):
                raise
        # A WAL database on a read-only filesystem: SQLite cannot create its shared-memory
        # file there. Nothing can write on that filesystem either, so read it as immutable.
        return connect("mode=ro&immutable=1")

    def _connect_writer(self) -> sqlite3.Connection:
        if _on_read_only_filesystem(self._path):
            # Checked first: with -wal and -shm files left by a crash, SQLite opens such a
            # file without complaint and the first write is the first to fail.
            raise sqlite3.OperationalError("the filesystem is mounted read-only")
        conn = self._connect(())
        try:
            self._check_ours(conn)  # before the first byte changes, WAL switch included
            (mode,) = conn.execute(_SQL_JOURNAL_WAL).fetchone()
            if str(mode).lower() != "wal":
                raise sqlite3.OperationalError(f"cannot switch to WAL mode (journal_mode={mode})")
            for pragma in (
                _SQL_SYNCHRONOUS[self._synchronous],
                *_SQL_COMMON_PRAGMAS,
                *_SQL_WRITER_PRAGMAS,
            ):
                conn.execute(pragma)
            conn.execute(_SQL_SCHEMA)
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect_reader(self) -> sqlite3.Connection:
        conn = self._connect((*_SQL_COMMON_PRAGMAS, *_SQL_READER_PRAGMAS))
        if self._read_only:
            try:
                if not self._check_ours(conn):
                    raise ConfigurationError(
                        f"SQLite database {self._path!r} holds no pyweft store (no kv table); "
                        "check the path"
                    )
            except BaseException:
                conn.close()
                raise
        return conn

    def _check_ours(self, conn: sqlite3.Connection) -> bool:
        """Refuse another application's database; True when pyweft's table is there."""
        objects = conn.execute(_SQL_OBJECTS).fetchall()
        foreign = sorted(f"{kind} {name}" for kind, name in objects if name != "kv")
        if foreign and not self._allow_foreign:
            shown = ", ".join(foreign[:5]) + (
                f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
            )
            raise ConfigurationError(
                f"SQLite database {self._path!r} holds objects that are not pyweft's ({shown}); "
                "it looks like another application's database, so pyweft left it untouched. "
                "Point pyweft at a file of its own, or pass allow_foreign_tables=True "
                "(?allow_foreign_tables=1 in the URL) to share this file on purpose"
            )
        if not any(name == "kv" for _, name in objects):
            return False
        columns = [(row[1], str(row[2]).upper(), row[5]) for row in conn.execute(_SQL_KV_COLUMNS)]
        if columns != [("key", "TEXT", 1), ("value", "BLOB", 0)]:
            raise ConfigurationError(
                f"SQLite database {self._path!r} has a table named kv that is not pyweft's "
                f"(columns {[c[0] for c in columns]}); pyweft left it untouched. Point pyweft "
                "at a file of its own"
            )
        return True

    def _run_writes(self, conn: sqlite3.Connection, jobs: list[WriteJob]) -> list[object]:
        """Run every queued batch in one transaction: all commit, or all fail.

        Each batch's conditions are checked before any of its writes, against the
        stored values as the batches queued before it left them, exactly as if they
        had committed one by one; a failed condition skips that batch alone. The
        group's reads and writes go to SQLite as a few multi-row statements (every
        condition key read at once, then each key's last write), not one statement
        per key: each statement hands the GIL back and forth with the event loop,
        which under load costs far more than the statement itself.
        """
        cur = conn.cursor()
        execute = cur.execute
        outcomes: list[object] = []
        try:
            execute(_SQL_BEGIN)
            wanted = list({c.key: None for job in jobs for c in job.conditions})
            stored: dict[str, bytes] = {}
            for i in range(0, len(wanted), _CHUNK):
                part = wanted[i : i + _CHUNK]
                ((found,),) = execute(_sql_in(_SQL_GET_IN, len(part)), part).fetchall()
                stored.update((k, bytes.fromhex(v)) for k, v in json.loads(found).items())
            written: dict[str, bytes | None] = {}  # each key's last write in this group
            for job in jobs:
                held = True
                for condition in job.conditions:
                    key = condition.key
                    now = written[key] if key in written else stored.get(key)
                    if now != condition.value:
                        held = False
                        break
                if held:
                    for op in job.ops:
                        written[op.key] = op.value if isinstance(op, Put) else None
                outcomes.append(held)
            puts: list[object] = []
            deletes: list[str] = []
            for key, value in written.items():
                if value is None:
                    deletes.append(key)
                else:
                    puts += (key, value)
            for i in range(0, len(deletes), _CHUNK):
                part = deletes[i : i + _CHUNK]
                execute(_sql_in(_SQL_DELETE_IN, len(part)), part)
            for i in range(0, len(puts), 2 * _CHUNK):
                values = puts[i : i + 2 * _CHUNK]
                execute(_sql_values(len(values) // 2), values)
            execute(_SQL_COMMIT)
            self._transactions += 1
        except Exception as exc:
            # If the rollback fails too, the original error is the one worth reporting.
            with contextlib.suppress(sqlite3.Error):
                conn.rollback()
            return [self._failure(exc, "commit", rolled_back=len(jobs)) for _ in jobs]
        finally:
            cur.close()
        return outcomes

    def _run_reads(self, conn: sqlite3.Connection, jobs: list[ReadJob]) -> list[object]:
        outcomes: list[object] = []
        execute = conn.execute
        for job in jobs:
            try:
                # fetchall() steps each statement to the end, so no read
                # transaction stays open to pin an old WAL snapshot.
                if isinstance(job, ReadManyJob):
                    # fetchall(): stepped to the end, so no read transaction stays open.
                    (row,) = execute(job.sql, job.params).fetchall()
                    outcomes.append(
                        [
                            value if reverse is None else _decode_rows(value, reverse)
                            for value, reverse in zip(row, job.shapes, strict=True)
                        ]
                    )
                    continue
                rows = execute(job.sql, job.params).fetchall()
            except Exception as exc:
                outcomes.append(self._failure(exc, "read", rolled_back=0))
                continue
            outcomes.append((rows[0][0] if rows else None) if job.single else rows)
        return outcomes

    def _failure(self, exc: Exception, action: str, *, rolled_back: int) -> StorageError:
        message = f"SQLite {action} on {self._path} failed: {exc}"
        if rolled_back:
            message += (
                f". Nothing was written: all {rolled_back} batch(es) committing together were "
                "rolled back. Retry once the cause (a lock held by another process, a full "
                "or read-only disk...) is gone"
            )
        error = StorageError(message)
        error.__cause__ = exc
        return error


def _check_path(path: str) -> None:
    if path in ("", ":memory:") or path.startswith("file:"):
        raise ConfigurationError(
            f"SQLiteStorage needs a file path, got {path!r}; "
            "use MemoryStorage (memory://) for a store that lives in memory"
        )
    if os.path.isdir(path):
        raise ConfigurationError(f"SQLite database path {path!r} is a directory, not a file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigurationError(
            f"cannot create SQLite database {path!r}: directory {parent!r} does not exist; "
            "create it first (pyweft does not create directories)"
        )


def _on_read_only_filesystem(path: str) -> bool:
    try:
        return bool(os.statvfs(os.path.dirname(os.path.abspath(path))).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def _read_only_reason(path: str) -> str:
    """Why ``path`` cannot be written, in words, or "" when it looks writable."""
    parent = os.path.dirname(os.path.abspath(path)) or "."
    if _on_read_only_filesystem(path):
        return f"it is on a read-only filesystem ({parent})"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return "the file is read-only (no write permission)"
    if not os.access(parent, os.W_OK):
        return f"its directory {parent} is read-only (no write permission)"
    return ""


def _scan_query(
    prefix: str, start: str | None, end: str | None, limit: int | None, reverse: bool
) -> tuple[str, tuple[object, ...]] | None:
    """The statement and parameters of a scan; ``None`` when it cannot return anything."""
    _check_key(prefix)
    lower = prefix
    if start is not None:
        _check_key(start)
        lower = max(lower, start)
    upper = prefix_end(prefix)
    if end is not None:
        _check_key(end)
        upper = end if upper is None else min(upper, end)
    if limit is None:
        limit = -1
    elif limit < 0:
        raise ValueError(f"scan limit must be >= 0, got {limit}")
    elif limit == 0:
        return None
    params = (lower, limit) if upper is None else (lower, upper, limit)
    return _SQL_SCAN[upper is not None, reverse], params


def _decode_rows(text: str, reverse: bool) -> list[tuple[str, bytes]]:
    """A scan column of :data:`_SQL_READ_MANY`, in key order (sorted here: SQLite does
    not promise an aggregate keeps the order of the rows it reads)."""
    rows = [(key, bytes.fromhex(value)) for key, value in json.loads(text)]
    rows.sort(reverse=reverse)  # code point order is UTF-8 byte order; keys are unique
    return rows


def _check_key(key: str) -> None:
    if not isinstance(key, str):
        raise TypeError(f"storage keys must be str, got {type(key)}")
    if not key.isascii():
        try:
            key.encode()
        except UnicodeEncodeError as exc:
            raise ValueError(f"storage key {key!r} is not valid UTF-8 text") from exc


def _check_ops(ops: Sequence[Op]) -> None:
    for op in ops:
        if isinstance(op, Put):
            if type(op.value) is not bytes and not isinstance(op.value, bytes):
                raise TypeError(f"Put value for {op.key!r} must be bytes, got {type(op.value)}")
        elif not isinstance(op, Delete):
            raise TypeError(f"batch ops must be Put or Delete, got {type(op)}")
        key = op.key
        if type(key) is not str or not key.isascii():  # the engine's keys: ASCII str
            _check_key(key)
