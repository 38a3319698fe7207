"""The one path by which the engine writes its own state.

Every engine-owned write (run creation, step outcomes, status changes) goes
through :class:`Committer`, so that ownership fencing added later applies to
all of them at once. The fence conditions are appended *before* choosing
between a plain and a conditional batch, so an unconditioned write can never
slip past the fence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyweft.storage.base import Expect, Op, Storage


class Committer:
    """Applies atomic batches for the engine, adding ownership fence conditions."""

    __slots__ = ("_fence", "_storage")

    def __init__(self, storage: Storage, fence: Callable[[], Sequence[Expect]] | None = None):
        self._storage = storage
        self._fence = fence

    async def commit(self, ops: Sequence[Op], conditions: Sequence[Expect] = ()) -> bool:
        """Write ``ops`` atomically if ``conditions`` (and the fence) hold.

        Returns ``False`` when a condition failed; storage failures raise.
        """
        if self._fence is not None:
            conditions = [*conditions, *self._fence()]
        if not conditions:
            await self._storage.batch(ops)
            return True
        return await self._storage.conditional_batch(conditions, ops)
