"""A store wrapper whose gates hold chosen writes, so a test can force a race's order.

A gate holds the first batch it matches either before the batch is applied, or after
(the write is stored, its reply reaches the engine late). ``quiet=True`` hides the
store's notifications, so the engine learns of changes only by its own polls and
wake-ups: a test that needs to know when the engine reads again uses it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from pyweft import Storage, open_storage
from pyweft.storage.base import Expect, Op
from support.backends import Backend

_NOTIFICATIONS = frozenset({"listen", "notify"})


class Gate:
    """Holds one write of the store: before it is applied, or after (its reply is late)."""

    def __init__(self, matches: Callable[[Sequence[Op]], bool], *, after: bool) -> None:
        self.matches = matches
        self.after = after
        self.reached = asyncio.Event()
        self.release = asyncio.Event()


class GatedStore:
    """A store that holds the writes its gates match, so a test can order a race."""

    def __init__(self, inner: Storage, *, quiet: bool = False) -> None:
        self._inner = inner
        self._quiet = quiet
        self.gates: list[Gate] = []

    def __getattr__(self, name: str) -> Any:
        if self._quiet and name in _NOTIFICATIONS:
            raise AttributeError(name)  # a store that cannot notify (the engine polls)
        return getattr(self._inner, name)

    def hold(self, matches: Callable[[Sequence[Op]], bool], *, after: bool) -> Gate:
        gate = Gate(matches, after=after)
        self.gates.append(gate)
        return gate

    async def conditional_batch(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> bool:
        gate = next((g for g in self.gates if g.matches(ops)), None)
        if gate is not None:
            self.gates.remove(gate)
            if not gate.after:
                gate.reached.set()
                await gate.release.wait()
        ok = await self._inner.conditional_batch(conditions, ops)
        if gate is not None and gate.after:
            gate.reached.set()
            await gate.release.wait()
        return ok


def open_store(backend: Backend) -> Storage:
    """The backend's store as a ``Storage`` object (opened from its URL if need be)."""
    raw = backend.storage()
    return raw if not isinstance(raw, str) else open_storage(raw)
