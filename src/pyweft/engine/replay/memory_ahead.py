"""Writes that a run's memory is already ahead of: a cancel waits for them.

A signal or update handler changes the run's memory before the record of its
application reaches the store (the handler's effect is known only once it ran).
A live query can see that memory at once. If a cancel request interrupted the
write, the run would end with the record lost: its journal would replay to a
state without the message, unlike what the query saw, and an update's caller
would never hear back. So the write finishes first, and the cancel is raised
after it. When the engine itself stops the run, nothing waits: the run is
resumed from the store later anyway, and the write's outcome no longer matters.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pyweft.storage.base import Expect, Op

if TYPE_CHECKING:
    from pyweft.engine.replay.run import Run

log = logging.getLogger("pyweft.engine")


async def commit_ahead(
    run: Run,
    ops: Sequence[Op],
    conditions: Sequence[Expect],
    then: Callable[[bool], None],
) -> None:
    """Commit ``ops`` for ``run`` (as ``Committer.commit``), finishing the write even if
    the run's task is cancelled meanwhile. ``then`` gets whether it was stored (it raises
    if the run must be replayed); a cancellation that came meanwhile is raised after it."""
    writing = asyncio.ensure_future(
        run.services.committer.commit(ops, conditions, workflow_id=run.id)
    )
    interrupted = False
    while not writing.done():
        try:
            await asyncio.shield(writing)
        except asyncio.CancelledError:
            if writing.done():
                break  # the write itself was cancelled: its result says so below
            if run.stopping:  # torn down by the engine: resumed from the store later
                writing.add_done_callback(_forget)
                raise
            interrupted = True
    then(writing.result())  # the write's own error, if it failed
    if interrupted:
        raise asyncio.CancelledError()


def _forget(writing: asyncio.Future[bool]) -> None:
    if not writing.cancelled() and writing.exception() is not None:
        log.debug("a write abandoned by a stopping run failed: %s", writing.exception())
