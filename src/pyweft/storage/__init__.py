"""Storage adapters behind one small ordered key-value protocol (see ``base``)."""

from __future__ import annotations

from pyweft.storage.base import Delete, Expect, Put, Storage, StorageCapabilities
from pyweft.storage.factory import default_storage_url, open_storage
from pyweft.storage.memory import MemoryStorage
from pyweft.storage.sqlite import SQLiteStorage

__all__ = [
    "Delete",
    "Expect",
    "MemoryStorage",
    "Put",
    "SQLiteStorage",
    "Storage",
    "StorageCapabilities",
    "default_storage_url",
    "open_storage",
]
