"""Re-driving runs that a transient storage failure stopped in this engine.

When a write of a run fails (an SQLite lock held past the busy timeout, a full
disk, a PostgreSQL backend terminated mid-commit), the run is torn down: the
write may or may not have landed, so the only safe way on is to re-read the
journal and replay. Nobody else will do that while this engine lives (it still
owns the store, or the run's claim), so this engine does it itself: it retries
with capped exponential backoff and jitter until the store answers again, then
resumes each stranded run from its journal. ``result()`` callers keep waiting
through all of it and get the run's result in the end.

After a pass that resumed runs, an engine that recovers runs (``recover=True``)
also sweeps for running runs nobody drives here: a child created by a commit
whose reply was lost, or a run created by a ``start`` that raised after its
write landed, are found that way.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

from pyweft.engine.replay.records import StepRecord
from pyweft.errors import StorageError

log = logging.getLogger("pyweft.redrive")

INITIAL_BACKOFF_S = 0.1
MAX_BACKOFF_S = 30.0


class Redriver:
    """Keeps a set of stranded runs and resumes them once the store works again."""

    def __init__(
        self,
        resume: Callable[[str], Awaitable[bool]],
        probe: Callable[[], Awaitable[None]],
        sweep: Callable[[], Awaitable[object]] | None,
        *,
        initial_backoff_s: float = INITIAL_BACKOFF_S,
        max_backoff_s: float = MAX_BACKOFF_S,
    ) -> None:
        self._resume = resume
        self._probe = probe
        self._sweep = sweep
        self._initial = initial_backoff_s
        self._max = max_backoff_s
        self._stranded: dict[str, asyncio.Event] = {}
        self._carried: dict[str, dict[int, StepRecord]] = {}
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._failures = 0
        self._redriven = 0
        self._rng = random.Random()

    @property
    def failures(self) -> int:
        """Runs torn down by a storage failure, once per run per incident."""
        return self._failures

    @property
    def redriven(self) -> int:
        """Runs resumed here after such a failure."""
        return self._redriven

    @property
    def stranded_count(self) -> int:
        return len(self._stranded)

    def stranded(
        self,
        workflow_id: str,
        cause: BaseException | None,
        *,
        carried: dict[int, StepRecord] | None = None,
        quiet: bool = False,
    ) -> None:
        """Note that ``workflow_id`` stopped here for a transient reason; resume it later.

        ``carried``: activity outcomes whose commit failed; the resumed run stores them
        at their steps instead of running those activities again.
        """
        if self._closed:
            return
        if carried:
            self._carried.setdefault(workflow_id, {}).update(carried)
        if workflow_id not in self._stranded:
            self._stranded[workflow_id] = asyncio.Event()
            if not quiet:
                self._failures += 1
                log.warning(
                    "workflow %s stopped by a storage failure (%s); this engine resumes it "
                    "from its journal once the store answers again",
                    workflow_id,
                    cause,
                )
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="pyweft-redrive")

    def take_carried(self, workflow_id: str) -> dict[int, StepRecord]:
        return self._carried.pop(workflow_id, {})

    def is_stranded(self, workflow_id: str) -> bool:
        return workflow_id in self._stranded

    async def wait(self, workflow_id: str) -> None:
        """Return once ``workflow_id`` is no longer stranded (resumed, or given up at close)."""
        event = self._stranded.get(workflow_id)
        if event is not None:
            await event.wait()

    def forget(self, workflow_id: str) -> None:
        """Stop trying to resume ``workflow_id`` (another engine owns it now)."""
        self._carried.pop(workflow_id, None)
        event = self._stranded.pop(workflow_id, None)
        if event is not None:
            event.set()

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for event in self._stranded.values():
            event.set()
        self._stranded.clear()
        self._carried.clear()

    async def _loop(self) -> None:
        delay = self._initial
        while self._stranded and not self._closed:
            # Jitter spreads engines that failed together over the interval.
            await asyncio.sleep(delay * (0.5 + self._rng.random()))
            try:
                await self._pass()
            except (StorageError, OSError) as exc:
                delay = min(delay * 2, self._max)
                log.debug("store still failing (%s); next try in about %.1fs", exc, delay)
                continue
            delay = self._initial

    async def _pass(self) -> None:
        # Reads often work while writes fail (a held lock, a full disk): resuming then
        # would only fail again. Wait until the store takes a write.
        await self._probe()
        resumed = False
        for workflow_id in list(self._stranded):
            try:
                # Raises while the store still fails: the run stays stranded for the next try.
                if await self._resume(workflow_id):
                    self._redriven += 1
                    resumed = True
            except (StorageError, OSError):
                raise
            except Exception:
                log.exception("could not resume stranded workflow %s; leaving it", workflow_id)
            self.forget(workflow_id)
        if resumed and self._sweep is not None:
            await self._sweep()
