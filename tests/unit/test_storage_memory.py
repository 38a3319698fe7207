from __future__ import annotations

from pathlib import Path

from pyweft.storage import MemoryStorage, Put, Storage
from pyweft.testing import StorageConformance


class TestMemoryStorageConformance(StorageConformance):
    async def make_storage(self, tmp_path: Path) -> Storage:
        return MemoryStorage()


async def test_memory_storage_declares_itself_ephemeral() -> None:
    storage = MemoryStorage()
    assert storage.capabilities.persistence == "ephemeral"
    assert storage.capabilities.durable_commit is False
    await storage.close()


async def test_each_memory_storage_has_its_own_data() -> None:
    first, second = MemoryStorage(), MemoryStorage()
    await first.batch([Put(key="k", value=b"v")])
    assert await second.get("k") is None
    await first.close()
    await second.close()
