"""The retention sweep: deletes finished runs once their retention has passed.

Finished runs are found through ``ix:end:{status}:{ended16}:{id}``, oldest end
first. Some runs in the expired range are kept (their type keeps that status
longer or forever, or an unfinished parent still awaits them), so each status
has a cursor: a pass continues after the last index entry the previous pass
looked at, and starts from the beginning again only once it has reached the end
of the expired range. Kept runs are therefore looked at once per round, never
in front of every pass, and the runs behind them are reached.

The cursor lives in this engine's memory: after a restart the first round starts
from the beginning, which is still correct, only slower.
"""

from __future__ import annotations

import asyncio
import logging

from pyweft.clock import TimerHandle
from pyweft.engine.control.core import EngineCore
from pyweft.engine.control.purge import purge_run
from pyweft.engine.replay import keys, quarantine, records
from pyweft.engine.replay.records import TERMINAL_STATUSES
from pyweft.errors import CorruptRecordError
from pyweft.storage.base import Delete

log = logging.getLogger("pyweft.maintenance")

_EXAMINED_PER_BATCH = 4
"""A pass looks at no more than this many index entries per run it may delete, so a
long stretch of kept runs costs a few passes, not one unbounded one."""


class RetentionSweeper:
    """Deletes finished runs once their retention passes, in bounded batches."""

    def __init__(
        self,
        core: EngineCore,
        default: dict[str, float],
        interval_s: float,
        batch_size: int,
    ) -> None:
        self._core = core
        self._default = default
        self._interval = interval_s
        self._batch = batch_size
        self._timer: TimerHandle | None = None
        self._task: asyncio.Task[int] | None = None
        self._lock = asyncio.Lock()  # one pass at a time, background or on demand
        self._statuses = sorted(TERMINAL_STATUSES)
        self._cursors: dict[str, str] = {}  # status -> last index key a pass looked at
        self._first = 0  # the status the next pass starts with (where the last one stopped)

    def retention_for(self, workflow_type: str, status: str) -> float | None:
        definition = self._core.workflows.get(workflow_type)
        if definition is not None and definition.retention and status in definition.retention:
            return definition.retention[status]
        return self._default.get(status)

    @property
    def active(self) -> bool:
        return bool(self._default) or any(d.retention for d in self._core.workflows.values())

    def start(self) -> None:
        if self.active:
            self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        clock = self._core.clock
        self._timer = clock.call_at(clock.now() + self._interval, self._due)

    def _due(self) -> None:
        if self._core.state != "open":
            return
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> int:
        try:
            return await self.sweep()
        except Exception:
            log.exception("retention sweep failed; it runs again next interval")
            return 0
        finally:
            if self._core.state == "open":
                self._arm()

    async def sweep(self) -> int:
        """One bounded pass: purge up to ``batch_size`` runs whose retention passed."""
        async with self._lock:
            return await self._sweep()

    def _shortest(self, status: str) -> float | None:
        configured = [self._default.get(status)] + [
            (d.retention or {}).get(status) for d in self._core.workflows.values()
        ]
        return min((r for r in configured if r is not None), default=None)

    async def _sweep(self) -> int:
        now = self._core.clock.now()
        budget = [self._batch, self._batch * _EXAMINED_PER_BATCH]  # deletes, looks
        count = len(self._statuses)
        for offset in range(count):
            index = (self._first + offset) % count
            status = self._statuses[index]
            finished = await self._sweep_status(status, now, budget)
            if not finished:  # out of budget: the next pass starts here
                self._first = index
                return self._batch - budget[0]
        self._first = 0
        return self._batch - budget[0]

    async def _sweep_status(self, status: str, now: float, budget: list[int]) -> bool:
        """Work through ``status``'s expired range from its cursor. True when it reached
        the end of the range (the cursor starts over), False when the budget ran out."""
        shortest = self._shortest(status)
        if shortest is None:
            self._cursors.pop(status, None)
            return True
        core = self._core
        prefix = keys.end_index_prefix(status)
        end = prefix + keys.ts16(now - shortest + 1e-6)
        while True:
            cursor = self._cursors.get(status)
            page = min(self._batch, budget[1])
            rows = await core.storage.scan(
                prefix, start=None if cursor is None else keys.after(cursor), end=end, limit=page
            )
            for key, _ in rows:
                self._cursors[status] = key
                budget[1] -= 1
                if await self._expire(keys.id_from_index_key(key), key, status, now):
                    budget[0] -= 1
                if budget[0] <= 0 or budget[1] <= 0:
                    return False
            if len(rows) < page:
                self._cursors.pop(status, None)  # the end: the next round starts over
                return True

    async def _expire(self, workflow_id: str, index_key: str, status: str, now: float) -> bool:
        """Delete the run behind ``index_key`` if its retention has passed. True if deleted."""
        core = self._core
        raw = await core.storage.get(keys.wf(workflow_id))
        if raw is None:  # a leftover entry of a run deleted without it
            await core.committer.commit([Delete(key=index_key)])
            return False
        try:
            state = records.decode_state(raw, key=keys.wf(workflow_id))
            keep = self.retention_for(state.type, status)
            ended = state.ended_at or state.updated_at
            if keep is None or ended + keep > now:
                return False
            return await purge_run(core, workflow_id)
        except CorruptRecordError as exc:  # logged once; the sweep goes on
            await quarantine.report(core, workflow_id, exc)
            return False
