"""An in-memory ordered store for tests and scratch runs.

It implements the full protocol, conditional batches included, so the
engine's unit tests exercise the same semantics as a real adapter. It is
never a silent default: nothing survives ``close()`` or the process.
"""

from __future__ import annotations

import asyncio
import contextlib
from bisect import bisect_left, insort
from collections.abc import Callable, Sequence

from pyweft.errors import StorageClosedError
from pyweft.storage.base import (
    Delete,
    Expect,
    Op,
    Put,
    StorageCapabilities,
    TakePlan,
    Unlisten,
    prefix_end,
)

_CAPABILITIES = StorageCapabilities(persistence="ephemeral", durable_commit=False)


class MemoryStorage:
    """A sorted key list (searched with :mod:`bisect`) plus a dict of values.

    Every operation first yields to the event loop once, like a real adapter
    waiting on I/O, so concurrent coroutines genuinely interleave between
    operations (CAS races in tests are real races). After that single yield
    the operation runs without awaiting, which makes each batch atomic with
    respect to every other coroutine.
    """

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._values: dict[str, bytes] = {}
        self._listeners: dict[str, list[Callable[[], None]]] = {}
        self._closed = False

    @property
    def capabilities(self) -> StorageCapabilities:
        return _CAPABILITIES

    async def get(self, key: str) -> bytes | None:
        await self._enter()
        return self._values.get(key)

    async def scan(
        self,
        prefix: str,
        *,
        start: str | None = None,
        end: str | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> list[tuple[str, bytes]]:
        if limit is not None and limit < 0:
            raise ValueError(f"scan limit must be >= 0, got {limit}")
        await self._enter()
        lower = prefix if start is None else max(prefix, start)
        upper = prefix_end(prefix)
        if end is not None:
            upper = end if upper is None else min(upper, end)
        lo = bisect_left(self._keys, lower)
        hi = len(self._keys) if upper is None else bisect_left(self._keys, upper)
        if hi <= lo:
            return []
        if limit is not None:
            if reverse:
                lo = max(lo, hi - limit)
            else:
                hi = min(hi, lo + limit)
        keys = self._keys[lo:hi]
        if reverse:
            keys.reverse()
        values = self._values
        return [(key, values[key]) for key in keys]

    async def count(self, prefix: str) -> int:
        """How many keys start with ``prefix`` (optional protocol extension)."""
        await self._enter()
        upper = prefix_end(prefix)
        lo = bisect_left(self._keys, prefix)
        hi = len(self._keys) if upper is None else bisect_left(self._keys, upper)
        return max(0, hi - lo)

    async def batch(self, ops: Sequence[Op]) -> None:
        ops = tuple(ops)  # what was checked is what gets applied after the yield
        _check_ops(ops)
        await self._enter()
        self._apply(ops)

    async def conditional_batch(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> bool:
        conditions, ops = tuple(conditions), tuple(ops)
        _check_ops(ops)
        await self._enter()
        values = self._values
        if any(values.get(cond.key) != cond.value for cond in conditions):
            return False
        self._apply(ops)
        return True

    async def take(
        self,
        prefix: str,
        *,
        start: str | None = None,
        limit: int,
        plan: TakePlan,
        peek: Sequence[str] = (),
    ) -> list[bool]:
        """Read, plan and write with no await in between (optional protocol extension):
        no other operation can interleave, so there is nothing to skip."""
        if limit < 0:
            raise ValueError(f"take limit must be >= 0, got {limit}")
        await self._enter()
        lower = prefix if start is None else max(prefix, start)
        upper = prefix_end(prefix)
        lo = bisect_left(self._keys, lower)
        hi = len(self._keys) if upper is None else bisect_left(self._keys, upper)
        pairs = [(key, self._values[key]) for key in self._keys[lo : min(hi, lo + limit)]]
        peeked = [self._values.get(key) for key in peek]
        batches = [(tuple(c), tuple(o)) for c, o in plan(pairs, peeked)]
        for _, ops in batches:
            _check_ops(ops)
        out = []
        for conditions, ops in batches:
            held = all(self._values.get(cond.key) == cond.value for cond in conditions)
            if held:
                self._apply(ops)
            out.append(held)
        return out

    async def notify(self, topic: str) -> None:
        """Call every listener of ``topic`` (soon, on the loop, never inside this call)."""
        await self._enter()
        loop = asyncio.get_running_loop()
        for callback in self._listeners.get(topic, ()):
            loop.call_soon(callback)

    async def listen(self, topic: str, callback: Callable[[], None]) -> Unlisten:
        self._raise_if_closed()
        self._listeners.setdefault(topic, []).append(callback)

        async def unlisten() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.get(topic, []).remove(callback)

        return unlisten

    async def close(self) -> None:
        self._closed = True
        self._keys = []
        self._values = {}
        self._listeners = {}

    async def _enter(self) -> None:
        # Checked both before and after the yield: close() may run in between.
        self._raise_if_closed()
        await asyncio.sleep(0)
        self._raise_if_closed()

    def _raise_if_closed(self) -> None:
        if self._closed:
            raise StorageClosedError(
                "MemoryStorage is closed (its data is gone); create a new storage to continue"
            )

    def _apply(self, ops: Sequence[Op]) -> None:
        keys, values = self._keys, self._values
        for op in ops:
            if isinstance(op, Put):
                if op.key not in values:
                    insort(keys, op.key)
                values[op.key] = op.value
            elif op.key in values:
                del values[op.key]
                del keys[bisect_left(keys, op.key)]


def _check_ops(ops: Sequence[Op]) -> None:
    """Reject values a durable adapter could not store, so memory-backed tests catch them."""
    for op in ops:
        if isinstance(op, Put):
            if not isinstance(op.value, bytes):
                raise TypeError(f"Put value for {op.key!r} must be bytes, got {type(op.value)}")
        elif not isinstance(op, Delete):
            raise TypeError(f"batch ops must be Put or Delete, got {type(op)}")
