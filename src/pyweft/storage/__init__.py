"""Storage adapters behind one small ordered key-value protocol (see ``base``).

``PostgresStorage`` is imported on first use, so that programs that never
touch PostgreSQL do not pay for importing psycopg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyweft.storage.base import Delete, Expect, Put, Storage, StorageCapabilities
from pyweft.storage.factory import default_storage_url, open_storage
from pyweft.storage.memory import MemoryStorage
from pyweft.storage.sqlite import SQLiteStorage

if TYPE_CHECKING:
    from pyweft.storage.postgres import PostgresStorage

__all__ = [
    "Delete",
    "Expect",
    "MemoryStorage",
    "PostgresStorage",
    "Put",
    "SQLiteStorage",
    "Storage",
    "StorageCapabilities",
    "default_storage_url",
    "open_storage",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresStorage":
        from pyweft.storage.postgres import PostgresStorage

        return PostgresStorage
    raise AttributeError(f"module 'pyweft.storage' has no attribute {name!r}")
