"""PostgreSQL LISTEN/NOTIFY behind ``PostgresStorage.notify`` and ``listen``.

Each ``listen`` holds one dedicated connection (not from the pool: a pooled
connection would be handed to others and stop listening) and calls its
callback for every notification. When that connection drops (a server
restart, ``idle_session_timeout``, a network cut), the listener reconnects
with backoff and calls the callback once more, since notifications sent
meanwhile are lost: whoever listens then looks for itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger("pyweft.storage.postgres")

_MAX_BACKOFF_S = 5.0


def channel_name(schema: str, topic: str) -> str:
    """A short, valid channel name unique to (schema, topic): names are cut at 63 bytes."""
    digest = hashlib.blake2b(f"{schema}\0{topic}".encode(), digest_size=12).hexdigest()
    return f"pyweft_{digest}"


class Listener:
    """LISTENs on one channel over its own connection until :meth:`stop`."""

    def __init__(
        self,
        conninfo: str,
        connect_kwargs: dict[str, Any],
        channel: str,
        callback: Callable[[], None],
        where: str,
    ) -> None:
        self._conninfo = conninfo
        self._kwargs = connect_kwargs
        self._channel = channel
        self._callback = callback
        self._where = where
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect and LISTEN; raises ``psycopg.Error`` if that fails the first time."""
        self._conn = await self._connect()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"pyweft-listen-{self._channel}"
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(self._conninfo, **self._kwargs)
        try:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _run(self) -> None:
        attempt = 0
        while True:
            conn = self._conn
            try:
                if conn is None or conn.closed:
                    self._conn = conn = await self._connect()
                    attempt = 0
                    self._callback()  # what was sent while we were away is lost: look now
                async for _ in conn.notifies():
                    self._callback()
                    attempt = 0
            except psycopg.Error as exc:
                attempt += 1
                delay = min(_MAX_BACKOFF_S, 0.05 * 2**attempt) * random.uniform(0.5, 1.5)
                log.warning(
                    "PostgreSQL notifications from %s were interrupted (%s); reconnecting in "
                    "%.2fs, and polling meanwhile",
                    self._where,
                    " ".join(str(exc).split()),
                    delay,
                )
                if conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        await conn.close()
                self._conn = None
                await asyncio.sleep(delay)
