"""PostgreSQL store: one ``kv`` table, psycopg 3 (async) behind a connection pool.

Compare-and-swap under concurrency. Every write (``batch`` and
``conditional_batch`` alike) is one autocommitted statement calling a
PL/pgSQL function: one round trip, one transaction. A lone batch goes at once
through ``{schema}.pyweft_write_v1``; batches submitted while others are in
flight are sent together through ``{schema}.pyweft_write_group_v1`` (group
commit, see :mod:`pyweft.storage.grouping`). The function takes an exclusive
transaction-level advisory lock for every key the group reads or writes, in
sorted order, then for each batch in turn compares the condition keys' stored
bytes and applies the batch's ops only if all of them hold, so a failed
condition leaves the other batches unaffected.
This is correct even for keys expected to be *absent*, which no row lock can
protect: the lock id is a hash of (schema, key), so any two writers of a key
serialise on its lock, held until commit (strict two-phase locking on keys).
A VOLATILE function takes a fresh snapshot for each statement, so the
comparison runs after every lock is granted and sees what each previous
holder committed (a lock is released only once its commit is visible), and
no one can change those keys before we commit. Two batches that both expect
``k`` absent cannot both see it absent; write skew (A expects ``x`` absent
and writes ``y``, B the reverse) cannot happen, as both lock both keys. A
hash collision only makes two keys wait for each other; sorted locking rules
out deadlocks between batches. Reads lock nothing: a ``get`` or ``scan`` is
one statement on one snapshot, so it sees a batch whole or not at all.

Retries. Deadlocks (40P01) and serialization failures (40001) roll back and
are retried, as are reads whose connection dropped, with jittered backoff
(by default at most 5 attempts within 2 s); then ``StorageError`` is raised.
A write whose connection dropped after sending is not retried: it may have
committed, and a retried CAS would report ``False`` for its own success. It
raises ``StorageError`` saying the outcome is unknown. Pooled connections the
server closed while idle are detected before use, without a round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import re
import select
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from pyweft.errors import ConfigurationError, StorageClosedError, StorageError
from pyweft.storage import pg_arrays as a
from pyweft.storage import pg_listen
from pyweft.storage import pg_sql as q
from pyweft.storage.base import (
    COMMIT_RINGS,
    Delete,
    Expect,
    Get,
    Op,
    Put,
    Read,
    ReadResult,
    StorageCapabilities,
    TakePlan,
    Unlisten,
    prefix_end,
)
from pyweft.storage.grouping import Coalescer

Conn = psycopg.AsyncConnection[Any]

_CAPABILITIES = StorageCapabilities(persistence="remote", durable_commit=True)
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_BYTE_ORDER_COLLATIONS = ("C", "POSIX")
_RETRIED_SQLSTATES = ("40001", "40P01")  # serialization failure, deadlock detected


class PostgresStorage:
    """The :class:`~pyweft.storage.base.Storage` protocol on a PostgreSQL table.

    ``conninfo`` is a libpq URL or ``key=value`` string. The schema (default
    ``public``), the table ``{schema}.kv`` and the function that writes to it
    are created on first use if missing. Nothing connects before the first
    call, so the constructor never blocks; use an instance from one event
    loop. Any number of processes, on any number of machines, may share a table.
    """

    notifies_on_commit = True  # see storage.base.ringing: rings ride in the group commit

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = "public",
        min_connections: int = 1,
        max_connections: int = 10,
        connect_timeout_s: float = 10.0,
        acquire_timeout_s: float = 30.0,
        retry_attempts: int = 5,
        retry_budget_s: float = 2.0,
        max_inflight_writes: int | None = None,
    ) -> None:
        if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigurationError(
                f"PostgreSQL schema {schema!r} is not a plain identifier: use 1-63 lowercase "
                "letters, digits and underscores, not starting with a digit"
            )
        if schema.startswith("pg_"):
            raise ConfigurationError(f"PostgreSQL schema {schema!r}: the pg_ prefix is reserved")
        if not 1 <= min_connections <= max_connections or retry_attempts < 1:
            raise ConfigurationError("need 1 <= min_connections <= max_connections, retries >= 1")
        if max_inflight_writes is None:
            max_inflight_writes = min(2, max_connections)
        if not 1 <= max_inflight_writes <= max_connections:
            raise ConfigurationError(
                f"max_inflight_writes must be between 1 and max_connections ({max_connections}), "
                f"got {max_inflight_writes}"
            )
        try:
            params = conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as exc:
            raise ConfigurationError(f"invalid PostgreSQL connection string: {exc}") from None
        self._conninfo = conninfo
        self._schema = schema
        self._where = _describe(params, schema)
        self.application_name: str = str(params.get("application_name") or f"pyweft:{schema}")
        """What ``pg_stat_activity`` shows for this store's connections."""
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": 0,  # every statement here repeats: prepare it at once
            "application_name": self.application_name,
            "client_encoding": "UTF8",  # text array elements are sent as UTF-8 bytes
        }
        if "connect_timeout" not in params:
            self._connect_kwargs["connect_timeout"] = max(1, round(connect_timeout_s))
        self._pool_sizes = (min_connections, max_connections)
        self._acquire_timeout_s = acquire_timeout_s
        self._retry_attempts = retry_attempts
        self._retry_budget_s = retry_budget_s
        self._lock_prefix = f"{schema}\0".encode()
        names = {
            "kv": sql.Identifier(schema, "kv"),
            "fn": sql.Identifier(schema, q.WRITE_FUNCTION),
            "group_fn": sql.Identifier(schema, q.GROUP_FUNCTION),
            "try_fn": sql.Identifier(schema, q.TRY_GROUP_FUNCTION),
            "disjoint_fn": sql.Identifier(schema, q.DISJOINT_GROUP_FUNCTION),
        }
        self._sql_get = _render(q.SQL_GET, names)
        self._sql_take = _render(q.SQL_TAKE, names)
        self._sql_take_peek = _render(q.SQL_TAKE_PEEK, names)
        self._sql_try_write_group = _render(q.SQL_TRY_WRITE_GROUP, names)
        self._sql_get_many = _render(q.SQL_GET_MANY, names)
        self._sql_write = _render(q.SQL_WRITE, names)
        self._sql_write_group = _render(q.SQL_WRITE_GROUP, names)
        self._sql_write_notify = _render(q.SQL_WRITE + q.NOTIFY_TAIL, names)
        self._sql_write_group_notify = _render(q.SQL_WRITE_GROUP + q.NOTIFY_TAIL, names)
        self._sql_write_disjoint = _render(q.SQL_WRITE_DISJOINT, names)
        self._sql_write_disjoint_notify = _render(q.SQL_WRITE_DISJOINT + q.NOTIFY_TAIL, names)
        self._sql_scan = {
            (low, high, rev): _render(q.SQL_SCAN.format(low, high, rev), names)
            for low in (">=", ">")
            for high in ("", " AND key < %s", " AND key <= %s")
            for rev in ("", " DESC")
        }
        self._sql_gets_tagged = _render(q.SQL_GETS_TAGGED, names)
        self._sql_scan_tagged = {
            (low, high, rev): _render(q.SQL_SCAN_TAGGED.format(low, high, rev), names)
            for low in (">=", ">")
            for high in ("", " AND key < %s", " AND key <= %s")
            for rev in ("", " DESC")
        }
        self._writes = Coalescer(self._send_group, max_inflight=max_inflight_writes)
        # Reads made while others are in flight go together, many keys to a statement.
        self._reads = Coalescer(
            self._send_gets, max_inflight=min(4, max_connections), max_group=256
        )
        self._listeners: set[pg_listen.Listener] = set()
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._open_lock = asyncio.Lock()
        self._closed = False

    @property
    def capabilities(self) -> StorageCapabilities:
        return _CAPABILITIES

    @property
    def schema(self) -> str:
        return self._schema  # validated: a plain identifier

    def __repr__(self) -> str:
        return f"PostgresStorage({self._where})"

    # --- protocol -------------------------------------------------------------------

    async def get(self, key: str) -> bytes | None:
        if "\0" in _check_key(key):
            self._raise_if_closed()
            return None  # PostgreSQL text cannot hold NUL, so no such key is stored
        self._raise_if_closed()
        return await self._reads.submit(key)

    async def _send_gets(self, keys: Sequence[str]) -> list[bytes | None]:
        """Read many keys in one statement (one snapshot); a lone key on its own."""
        if len(keys) == 1:
            rows = await self._execute("read", self._sql_get, (keys[0],), idempotent=True)
            return [bytes(rows[0][0]) if rows else None]
        wanted = a.array(a.TEXT, (key.encode() for key in set(keys)))
        rows = await self._execute("read", self._sql_get_many, (wanted,), idempotent=True)
        found = {key: bytes(value) for key, value in rows}
        return [found.get(key) for key in keys]

    async def scan(
        self,
        prefix: str,
        *,
        start: str | None = None,
        end: str | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> list[tuple[str, bytes]]:
        bounds = _scan_bounds(prefix, start, end, limit, reverse)
        if bounds is None:
            self._raise_if_closed()
            return []
        shape, params = bounds
        rows = await self._execute("scan", self._sql_scan[shape], params, idempotent=True)
        return [(key, bytes(value)) for key, value in rows]

    async def read_many(self, reads: Sequence[Read]) -> list[ReadResult]:
        """Every read in one statement, one round trip (optional protocol extension):
        a UNION ALL whose branches tag their rows with the read they answer."""
        self._raise_if_closed()
        gets = [r.key for r in reads if isinstance(r, Get) and "\0" not in _check_key(r.key)]
        branches: list[bytes] = []
        params: list[Any] = []
        if gets:
            branches.append(self._sql_gets_tagged)
            params.append(a.array(a.TEXT, (key.encode() for key in set(gets))))
        scans: dict[int, bool] = {}  # read index -> reverse
        for i, r in enumerate(reads):
            if isinstance(r, Get):
                continue
            bounds = _scan_bounds(r.prefix, r.start, r.end, r.limit, r.reverse)
            if bounds is not None:
                branches.append(self._sql_scan_tagged[bounds[0]])
                params += (i, *bounds[1])
                scans[i] = r.reverse
        found: dict[str, bytes] = {}
        scanned: dict[int, list[tuple[str, bytes]]] = {i: [] for i in scans}
        if branches:
            query = b" UNION ALL ".join(branches)
            for tag, key, value in await self._execute("read", query, params, idempotent=True):
                if tag < 0:
                    found[key] = bytes(value)
                else:
                    scanned[tag].append((key, bytes(value)))
        for i, reverse in scans.items():
            scanned[i].sort(reverse=reverse)  # UNION ALL promises no order across branches
        return [
            found.get(r.key) if isinstance(r, Get) else scanned.get(i, [])
            for i, r in enumerate(reads)
        ]

    async def batch(self, ops: Sequence[Op]) -> None:
        await self._write((), ops)

    async def conditional_batch(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> bool:
        return await self._write(conditions, ops)

    async def notify(self, topic: str) -> None:
        """Wake every ``listen(topic, ...)`` on this schema, in any process (best effort)."""
        channel = pg_listen.channel_name(self._schema, topic)
        if self._writes.queued:  # a group is about to go: ride with it
            await self._writes.submit(a.Batch({}, {}, channel))
            return
        await self._execute("notify", q.SQL_NOTIFY, (channel,), idempotent=True)

    async def listen(self, topic: str, callback: Callable[[], None]) -> Unlisten:
        """Call ``callback`` for each ``notify(topic)``; over a connection of its own."""
        self._raise_if_closed()
        channel = pg_listen.channel_name(self._schema, topic)
        listener = pg_listen.Listener(
            self._conninfo, self._connect_kwargs, channel, callback, self._where
        )
        try:
            await listener.start()
        except psycopg.Error as exc:
            raise self._error(exc, "connect") from exc
        self._listeners.add(listener)

        async def unlisten() -> None:
            self._listeners.discard(listener)
            await listener.stop()

        return unlisten

    async def close(self) -> None:
        """Close the pool. Idempotent; statements already running finish first."""
        self._closed = True
        listeners, self._listeners = self._listeners, set()
        await asyncio.gather(*(listener.stop() for listener in listeners))
        async with self._open_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # --- writes ---------------------------------------------------------------------

    async def _write(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> bool:
        final: dict[str, bytes | None] = {}  # ops collapse to each key's last write
        for op in ops:
            if isinstance(op, Put):
                if not isinstance(op.value, bytes):
                    raise TypeError(f"Put value for {op.key!r} must be bytes, got {type(op.value)}")
                if "\0" in _check_key(op.key):
                    raise ValueError(
                        f"storage key {op.key!r} contains NUL; PostgreSQL cannot hold it"
                    )
                final[op.key] = op.value
            elif isinstance(op, Delete):
                if "\0" not in _check_key(op.key):  # else it cannot exist: nothing to delete
                    final[op.key] = None
            else:
                raise TypeError(f"batch ops must be Put or Delete, got {type(op)}")
        expected: dict[str, bytes | None] = {}
        held = True
        for c in conditions:
            if not isinstance(c, Expect) or not isinstance(c.value, bytes | None):
                raise TypeError(f"conditions must be Expect(key, bytes | None), got {c!r}")
            if "\0" in _check_key(c.key):
                held = held and c.value is None  # such a key is always absent
            elif expected.setdefault(c.key, c.value) != c.value:
                held = False  # the same key expected with two different values
        rings = COMMIT_RINGS.get()  # see storage.base.ringing
        channels = tuple(pg_listen.channel_name(self._schema, t) for t in rings) if rings else ()
        if not held or not (final or expected):
            self._raise_if_closed()
            if held and channels:  # nothing to write, but the rings asked for
                for channel in channels:
                    await self._writes.submit(a.Batch({}, {}, channel))
            return held
        return await self._writes.submit(a.Batch(expected, final, None, channels))

    async def _send_group(self, items: Sequence[a.Batch]) -> list[bool]:
        """One round trip and one transaction for every batch of a group, and for the
        notifications that ride with it."""
        batches = [b for b in items if b.notify is None]
        channels = sorted(
            {b.notify for b in items if b.notify is not None}
            | {c for b in batches for c in b.channels}
        )
        if not channels:
            return await self._send_batches(batches, None)
        tail = a.array(a.TEXT, (c.encode() for c in channels))
        if not batches:
            await self._execute("notify", q.SQL_NOTIFY_MANY, (tail,), idempotent=True)
            return [True] * len(items)
        held = iter(await self._send_batches(batches, tail))
        return [True if b.notify is not None else next(held) for b in items]

    async def _send_batches(self, batches: Sequence[a.Batch], notify: a.Array | None) -> list[bool]:
        if len(batches) == 1:
            return [await self._send_one(batches[0], notify)]
        lock_ids = sorted({self._lock_id(k) for b in batches for k in (*b.expected, *b.final)})
        locks = a.array(a.INT8, (a.INT8_BYTES.pack(i) for i in lock_ids))
        params: tuple[a.Array | int, ...]
        if a.disjoint(batches):  # one statement for all, not three per batch
            params = (locks, len(batches), *a.disjoint_arrays(batches))
            query, with_notify = self._sql_write_disjoint, self._sql_write_disjoint_notify
        else:
            params = (locks, *a.group_arrays(batches))
            query, with_notify = self._sql_write_group, self._sql_write_group_notify
        if notify is not None:
            query, params = with_notify, (*params, notify)
        rows = await self._execute("commit", query, params, idempotent=False)
        held: list[bool] = rows[0][0]
        if len(held) != len(batches):
            raise StorageError(f"PostgreSQL write function answered {held!r} for {len(batches)}")
        return held

    async def take(
        self,
        prefix: str,
        *,
        start: str | None = None,
        limit: int,
        plan: TakePlan,
        peek: Sequence[str] = (),
    ) -> list[bool]:
        """Take rows with ``FOR UPDATE SKIP LOCKED`` and write what ``plan`` makes of them,
        in one transaction and two round trips (optional protocol extension; see
        :class:`~pyweft.storage.base.TakingStorage`)."""
        self._raise_if_closed()
        if limit < 0:
            raise ValueError(f"take limit must be >= 0, got {limit}")
        lower = _check_key(prefix) if start is None else max(prefix, _check_key(start))
        upper = prefix_end(_check_key(prefix))
        if upper is None or "\0" in lower or limit == 0:
            raise ValueError(
                f"take needs a non-empty prefix and a start without NUL, got {prefix!r}, {start!r}"
            )
        pool = self._pool or await self._open()
        try:
            conn = await pool.getconn(timeout=self._acquire_timeout_s)
        except PoolClosed:
            raise self._closed_error() from None
        except PoolTimeout as exc:
            raise StorageError(
                f"no PostgreSQL connection to {self._where} became available within "
                f"{self._acquire_timeout_s:g}s; is the server up and reachable?"
            ) from exc
        sent = False
        try:
            async with conn.pipeline() as pipe:
                await conn.execute(b"BEGIN")
                wanted = [key for key in peek if "\0" not in _check_key(key)]
                found: dict[str, bytes] = {}
                pairs: list[tuple[str, bytes]] = []
                if wanted:
                    keys = a.array(a.TEXT, (key.encode() for key in set(wanted)))
                    cur = await conn.execute(self._sql_take_peek, (lower, upper, limit, keys))
                    await pipe.sync()
                    for peeked_row, key, value in await cur.fetchall():
                        if peeked_row:
                            found[key] = bytes(value)
                        else:
                            pairs.append((key, bytes(value)))
                    pairs.sort()  # UNION ALL promises no order
                else:
                    cur = await conn.execute(self._sql_take, (lower, upper, limit))
                    await pipe.sync()
                    pairs = [(key, bytes(value)) for key, value in await cur.fetchall()]
                peeked = [found.get(k) for k in peek]
                batches = [self._checked(c, o) for c, o in plan(pairs, peeked)]
                writing = [b for b in batches if b is not None]
                wrote = None
                if writing:
                    sent = True
                    wrote = await conn.execute(self._sql_try_write_group, self._try_params(writing))
                await conn.execute(b"COMMIT")
                await pipe.sync()
                held = list((await wrote.fetchall())[0][0]) if wrote is not None else []
        except BaseException as exc:
            if not (conn.broken or conn.closed):
                with contextlib.suppress(Exception):
                    await conn.rollback()
            if isinstance(exc, psycopg.Error):
                lost = conn.broken or conn.closed
                raise self._error(exc, "take", unknown=sent and lost) from exc
            raise
        finally:
            await pool.putconn(conn)
        if len(held) != len(writing):
            raise StorageError(f"PostgreSQL take answered {held!r} for {len(writing)} batches")
        answers = iter(held)
        return [False if b is None else next(answers) for b in batches]

    def _checked(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> a.Batch | None:
        """A planned batch as :meth:`_write` would send it; ``None``: it cannot hold."""
        final: dict[str, bytes | None] = {}
        for op in ops:
            if isinstance(op, Put):
                if not isinstance(op.value, bytes) or "\0" in _check_key(op.key):
                    raise ValueError(f"take: cannot store {op!r}")
                final[op.key] = op.value
            elif isinstance(op, Delete):
                if "\0" not in _check_key(op.key):
                    final[op.key] = None
            else:
                raise TypeError(f"batch ops must be Put or Delete, got {type(op)}")
        expected: dict[str, bytes | None] = {}
        for c in conditions:
            if "\0" in _check_key(c.key):
                if c.value is not None:
                    return None
            elif expected.setdefault(c.key, c.value) != c.value:
                return None
        return a.Batch(expected, final)

    def _try_params(self, batches: Sequence[a.Batch]) -> tuple[a.Array, ...]:
        lock_ids: list[int] = []
        l_end: list[int] = []
        for b in batches:
            lock_ids += {self._lock_id(k) for k in (*b.expected, *b.final)}
            l_end.append(len(lock_ids))
        return (
            a.array(a.INT4, (a.INT4_BYTES.pack(i) for i in l_end)),
            a.array(a.INT8, (a.INT8_BYTES.pack(i) for i in lock_ids)),
            *a.group_arrays(batches),
        )

    async def _send_one(self, batch: a.Batch, notify: a.Array | None = None) -> bool:
        """A lone batch, through the simpler function: no per-batch loop on the server."""
        expected, final = batch.expected, batch.final
        lock_ids = sorted({self._lock_id(key) for key in (*expected, *final)})
        puts = [(key, value) for key, value in final.items() if value is not None]
        params: tuple[a.Array, ...] = (
            a.array(a.INT8, (a.INT8_BYTES.pack(i) for i in lock_ids)),
            a.array(a.TEXT, (key.encode() for key in expected)),
            a.array(a.BYTEA, expected.values()),
            a.array(a.TEXT, (key.encode() for key, value in final.items() if value is None)),
            a.array(a.TEXT, (key.encode() for key, _ in puts)),
            a.array(a.BYTEA, (value for _, value in puts)),
        )
        query = self._sql_write
        if notify is not None:
            query, params = self._sql_write_notify, (*params, notify)
        rows = await self._execute("commit", query, params, idempotent=False)
        return bool(rows[0][0])

    # --- connections, retries, errors -----------------------------------------------

    async def _execute(
        self, action: str, query: bytes, params: Sequence[Any], *, idempotent: bool
    ) -> list[Any]:
        """Run one autocommitted statement, retrying what is safe to retry."""
        self._raise_if_closed()
        pool = self._pool or await self._open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._retry_budget_s
        task = asyncio.current_task()
        for attempt in range(1, self._retry_attempts + 1):
            cancels = task.cancelling() if task is not None else 0
            try:
                conn = await pool.getconn(timeout=self._acquire_timeout_s)
            except PoolClosed:
                raise self._closed_error() from None
            except PoolTimeout as exc:
                raise StorageError(
                    f"no PostgreSQL connection to {self._where} became available within "
                    f"{self._acquire_timeout_s:g}s; is the server up and reachable?"
                ) from exc
            try:
                if task is not None and task.cancelling() > cancels:
                    # The pool waits with asyncio.wait_for, which before Python 3.12
                    # can swallow a cancellation racing with its end (CPython #86296).
                    raise asyncio.CancelledError
                return await self._query(conn, query, params)
            except psycopg.Error as exc:
                # A live connection means the server reported the error and rolled the
                # statement back; a lost one leaves the fate of a write unknown.
                lost = conn.broken or conn.closed
                if lost and not idempotent:
                    raise self._error(exc, action, unknown=True) from exc
                delay = _backoff(attempt)
                if (
                    not (lost or exc.sqlstate in _RETRIED_SQLSTATES)
                    or attempt == self._retry_attempts
                    or loop.time() + delay > deadline
                ):
                    raise self._error(exc, action) from exc
            finally:
                await pool.putconn(conn)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _query(self, conn: Conn, query: bytes, params: Sequence[Any]) -> list[Any]:
        return await (await conn.execute(query, params)).fetchall()

    async def _open(self) -> AsyncConnectionPool[Conn]:
        async with self._open_lock:
            self._raise_if_closed()
            if self._pool is not None:
                return self._pool
            await self._set_up()
            low, high = self._pool_sizes
            pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
                self._conninfo,
                kwargs=self._connect_kwargs,
                min_size=low,
                max_size=high,
                open=False,
                configure=_configure,
                check=_check_idle,
                timeout=self._acquire_timeout_s,
                name=f"pyweft-{self._schema}",
            )
            try:
                await pool.open(wait=True, timeout=self._acquire_timeout_s)
            except BaseException as exc:
                await pool.close()
                if isinstance(exc, psycopg.Error):
                    raise self._error(exc, "connect") from exc
                raise
            self._pool = pool
            return pool

    async def _set_up(self) -> None:
        """Connect once, create what is missing and check what exists."""
        try:
            conn = await psycopg.AsyncConnection.connect(self._conninfo, **self._connect_kwargs)
        except psycopg.Error as exc:
            raise self._error(exc, "connect") from exc
        async with conn:
            try:
                await self._create_missing(conn)
            except psycopg.Error as exc:
                raise self._error(exc, "set-up") from exc

    async def _create_missing(self, conn: Conn) -> None:
        encoding = conn.info.parameter_status("server_encoding")
        if encoding != "UTF8":
            raise ConfigurationError(
                f"PostgreSQL at {self._where} uses server_encoding {encoding!r}; pyweft needs a "
                "UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')"
            )
        names = {
            "schema": sql.Identifier(self._schema),
            "kv": sql.Identifier(self._schema, "kv"),
            "fn": sql.Identifier(self._schema, q.WRITE_FUNCTION),
            "group_fn": sql.Identifier(self._schema, q.GROUP_FUNCTION),
            "try_fn": sql.Identifier(self._schema, q.TRY_GROUP_FUNCTION),
            "disjoint_fn": sql.Identifier(self._schema, q.DISJOINT_GROUP_FUNCTION),
        }
        async with conn.transaction():
            # Serialise concurrent first uses: CREATE ... IF NOT EXISTS can still race.
            await conn.execute(q.SQL_SETUP_LOCK, (self._lock_id(""),))
            found = {
                "schema": self._schema,
                "fn": q.WRITE_FUNCTION,
                "group_fn": q.GROUP_FUNCTION,
                "try_fn": q.TRY_GROUP_FUNCTION,
                "disjoint_fn": q.DISJOINT_GROUP_FUNCTION,
            }
            row = await (await conn.execute(q.SQL_EXISTING, found)).fetchone()
            has_schema, has_function, has_group, has_try, has_disjoint = row or (False,) * 5
            if not has_schema:
                await conn.execute(sql.SQL(q.SQL_CREATE_SCHEMA).format(**names))
            columns = await (await conn.execute(q.SQL_COLUMNS, (self._schema,))).fetchall()
            if not columns:
                await conn.execute(sql.SQL(q.SQL_CREATE_TABLE).format(**names))
            else:
                self._check_table({name: (kind, coll) for name, kind, coll in columns})
            if not has_function:
                await conn.execute(sql.SQL(q.SQL_CREATE_WRITE).format(**names))
            if not has_group:
                await conn.execute(sql.SQL(q.SQL_CREATE_GROUP).format(**names))
            if not has_try:
                await conn.execute(sql.SQL(q.SQL_CREATE_TRY_GROUP).format(**names))
            if not has_disjoint:
                await conn.execute(sql.SQL(q.SQL_CREATE_DISJOINT).format(**names))

    def _check_table(self, columns: dict[str, tuple[str, str | None]]) -> None:
        if columns.get("key", ("", ""))[0] != "text" or columns.get("value", ("",))[0] != "bytea":
            raise ConfigurationError(
                f"table {self._schema}.kv at {self._where} exists but is not pyweft's (key TEXT, "
                f"value BYTEA); found {', '.join(f'{n} {t}' for n, (t, _) in columns.items())}"
            )
        if columns["key"][1] not in _BYTE_ORDER_COLLATIONS:
            raise ConfigurationError(
                f"table {self._schema}.kv at {self._where} orders keys by collation "
                f'{columns["key"][1]!r}; pyweft needs byte order (key TEXT COLLATE "C"): '
                "recreate the table or choose another schema"
            )

    def _lock_id(self, key: str) -> int:
        """The advisory lock guarding ``key`` in this schema (signed 64-bit, as int8)."""
        digest = hashlib.blake2b(self._lock_prefix + key.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _closed_error(self) -> StorageClosedError:
        return StorageClosedError(f"PostgresStorage for {self._where} is closed; open a new one")

    def _error(self, exc: psycopg.Error, action: str, *, unknown: bool = False) -> StorageError:
        message = f"PostgreSQL {action} on {self._where} failed: {str(exc).strip()}"
        if action == "connect":
            message += ". Check that the server is running and reachable and the URL is right"
        elif unknown:
            message += (
                ". The connection was lost after the batch was sent, so it may or may not have "
                "been applied; read the affected keys before retrying"
            )
        elif action == "commit":
            message += ". Nothing was written"
        return StorageError(message)


# --- helpers ----------------------------------------------------------------------------


def _backoff(attempt: int) -> float:
    """Jittered exponential backoff: about 20, 40, 80, 160 ms..., capped at 400 ms."""
    return min(0.4, 0.01 * 2.0**attempt) * random.uniform(0.5, 1.5)


def _render(template: str, names: dict[str, sql.Identifier]) -> bytes:
    return sql.SQL(template).format(**names).as_bytes(None)


def _describe(params: dict[str, Any], schema: str) -> str:
    """Where the store lives, for messages and repr: never the password."""
    host = params.get("host") or params.get("hostaddr") or "the local socket"
    port = params.get("port") or "5432"
    user = f"{params['user']}@" if params.get("user") else ""
    database = params.get("dbname") or "(default database)"
    return f"{user}{host}:{port}/{database} (schema {schema})"


async def _configure(conn: Conn) -> None:
    conn.adapters.register_dumper(a.Array, a.ArrayDumper)
    await conn.execute(q.SQL_CONFIGURE)


# Array parameters in PostgreSQL's binary format, built directly: psycopg's generic
# list dumpers inspect every element on every call, which costs more than the query.
async def _check_idle(conn: Conn) -> None:
    """Reject a pooled connection the server closed while idle: it has something to read."""
    if conn.broken or conn.closed:
        raise psycopg.OperationalError("connection is closed")
    readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    if readable:
        await conn.close()  # so that the pool discards it instead of handing it out again
        raise psycopg.OperationalError("the server closed this idle connection")


def _scan_bounds(
    prefix: str, start: str | None, end: str | None, limit: int | None, reverse: bool
) -> tuple[tuple[str, str, str], tuple[Any, ...]] | None:
    """The shape of a scan's statement and its parameters; ``None`` if it finds nothing."""
    lower = _check_key(prefix) if start is None else max(prefix, _check_key(start))
    upper = prefix_end(_check_key(prefix))
    if end is not None:
        upper = _check_key(end) if upper is None else min(upper, _check_key(end))
    if limit is not None and limit < 0:
        raise ValueError(f"scan limit must be >= 0, got {limit}")
    if limit == 0 or "\0" in prefix:
        return None
    # Stored keys never hold NUL, so a bound such as "k\0" (the engine's
    # "just after k") means: > "k" as a start, <= "k" as an end.
    lower_op, upper_op = ">=", "" if upper is None else " AND key < %s"
    if "\0" in lower:
        lower_op, lower = ">", lower[: lower.index("\0")]
    if upper is not None and "\0" in upper:
        upper_op, upper = " AND key <= %s", upper[: upper.index("\0")]
    params = (lower, limit) if upper is None else (lower, upper, limit)
    return (lower_op, upper_op, " DESC" if reverse else ""), params


def _check_key(key: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"storage keys must be str, got {type(key)}")
    if not key.isascii():
        try:
            key.encode()
        except UnicodeEncodeError as exc:
            raise ValueError(f"storage key {key!r} is not valid UTF-8 text") from exc
    return key
