"""Storage backends for engine tests: the same test runs on memory and on SQLite."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyweft import Engine, MemoryStorage, Storage, VirtualClock


@dataclass
class Backend:
    """Makes engines that share one store, so a test can 'restart' the process."""

    name: str
    path: Path
    clock: VirtualClock = field(default_factory=VirtualClock)
    _memory: MemoryStorage | None = None

    def storage(self) -> str | Storage:
        if self.name == "memory":
            if self._memory is None:
                self._memory = MemoryStorage()
            return self._memory
        return f"sqlite:///{self.path / 'engine.db'}"

    def engine(self, **kwargs: Any) -> Engine:
        kwargs.setdefault("clock", self.clock)
        return Engine(self.storage(), **kwargs)
