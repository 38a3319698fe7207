"""The one path by which the engine writes its own state.

Every engine-owned write (run creation, step outcomes, status changes) goes
through :class:`Committer`, so ownership fencing applies to all of them at
once. Fence conditions are appended *before* choosing between a plain and a
conditional batch, so an unconditioned write can never slip past the fence,
and a failed fenced write is checked for deposition before it is reported as
an ordinary lost race.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from pyweft.storage.base import Expect, Op, Put, Storage, notifies_on_commit, ringing

log = logging.getLogger("pyweft.commit")


class Fence(Protocol):
    """An ownership mode's guard on engine writes."""

    def conditions(self, workflow_id: str | None = None) -> list[Expect]:
        """Conditions a write (for this run, if given) must carry; raises if we may not write."""
        ...

    async def disambiguate(self, workflow_id: str | None = None) -> None:
        """After a failed conditional write: raise if it failed because we were deposed."""
        ...


WAKE_TOPIC = "wake"
"""The notification topic a write of a wake-up marker is announced on (see wakeups)."""


class Committer:
    """Applies atomic batches for the engine, adding ownership fence conditions.

    On a store that can notify other processes, a committed batch that leaves a
    wake-up marker (``wake:``) is announced, so the engine driving that run looks
    at once instead of at its next poll.
    """

    __slots__ = ("_notify", "_storage", "fence", "on_commit", "rings_on_commit")

    def __init__(self, storage: Storage, fence: Fence | None = None) -> None:
        self._storage = storage
        self.fence = fence
        self.on_commit: Callable[[float], None] | None = None  # seconds per batch (metrics)
        self._notify: Callable[[str], Awaitable[None]] | None = getattr(storage, "notify", None)
        # commit(rings=...) notifies in the write's own transaction (see storage.base.ringing)
        self.rings_on_commit = notifies_on_commit(storage)

    async def commit(
        self,
        ops: Sequence[Op],
        conditions: Sequence[Expect] = (),
        *,
        workflow_id: str | None = None,
        rings: Sequence[str] = (),
    ) -> bool:
        """Write ``ops`` atomically if ``conditions`` (and the fence) hold.

        ``workflow_id`` names the run a write belongs to, for per-run fencing
        (``ownership="workflow-lease"``); engine-scoped writes leave it out.
        ``rings``: topics to notify in the write's transaction; only where
        :attr:`rings_on_commit` (elsewhere the caller rings after the write).

        Returns ``False`` when a condition failed; storage failures raise, and
        a write rejected because another engine took over raises
        :class:`~pyweft.errors.EngineDeposedError`.
        """
        fence = self.fence
        if fence is not None:
            before_write = getattr(fence, "before_write", None)  # a claim past its expiry
            if before_write is not None:
                await before_write(workflow_id)
            conditions = [*conditions, *fence.conditions(workflow_id)]
        observe = self.on_commit
        began = time.perf_counter() if observe is not None else 0.0
        announce = _leaves_wake_marker(ops)
        if self.rings_on_commit and (rings or announce):
            with ringing([*rings, WAKE_TOPIC] if announce else rings):
                ok = await self._storage.conditional_batch(conditions, ops)
            announce = False  # sent with the write
        elif not conditions:
            await self._storage.batch(ops)
            ok = True
        else:
            ok = await self._storage.conditional_batch(conditions, ops)
        if not ok and fence is not None and conditions:
            await fence.disambiguate(workflow_id)
        if observe is not None:
            observe(time.perf_counter() - began)
        if ok and announce:
            await self.announce()
        return ok

    async def announce(self) -> None:
        """Tell every engine on the store to look now (if the store can notify)."""
        if self._notify is None:
            return
        try:
            await self._notify(WAKE_TOPIC)
        except Exception as exc:  # what was written is stored: the next poll finds it anyway
            log.warning("could not announce a change (%s); other engines will poll for it", exc)


def _leaves_wake_marker(ops: Sequence[Op]) -> bool:
    return any(op.key.startswith("wake:") and isinstance(op, Put) for op in ops)
