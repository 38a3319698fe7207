"""The engine every CLI command opens: a client of the store, which drives nothing.

Commands open the store as a *client* (``role="client"``): it takes no file lock,
no lease and no claims, never recovers or adopts runs, and leaves whatever it
starts or resumes to the engine that holds the store. So ``pyweft workflows
list`` works while an application's engine runs on the same SQLite file.

The CLI never creates a store: a mistyped path fails with a clear message
instead of leaving an empty database behind. Inspection commands open SQLite
read-only, so they work on a read-only file and change nothing in it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

from pyweft import Engine, PayloadCodec
from pyweft.cli import cli_codec
from pyweft.storage import open_storage


@asynccontextmanager
async def open_engine(
    db: str | None,
    *,
    workflows: Iterable[Callable[..., Any]] = (),
    codec: PayloadCodec | None = None,
    read_only: bool = False,
) -> AsyncIterator[Engine]:
    """An open client engine on ``db`` for one short-lived command (``async with``).

    ``read_only=True`` for commands that only look (list, show, count, doctor...).
    """
    storage = open_storage(db, sqlite_create=False, read_only=read_only)
    try:
        async with Engine(
            storage, role="client", workflows=workflows, codec=codec or cli_codec()
        ) as engine:
            yield engine
    finally:
        await storage.close()


__all__ = ["open_engine"]
