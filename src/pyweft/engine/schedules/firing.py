"""The firing loop: one timer at the earliest ``sched-due:`` entry, on the engine's clock.

No schedule is polled. The loop arms a single clock timer at the earliest due
entry in the store (re-armed whenever this engine changes a schedule), plus a
real-time refresh every ``poll_interval`` that reads only that first entry, so
a schedule created or changed by another process is noticed (not on a memory
store, which no other process can write).

Firing an occurrence is one conditional batch: the run (whose id derives from
the schedule id and the nominal time), the schedule's new state and its next
``sched-due:`` entry, conditioned on the schedule's previous bytes. Several
engines on one store may all try; exactly one batch lands, the others see the
record changed, re-read it and find nothing left to do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pyweft.clock import TimerHandle
from pyweft.engine.control import creation
from pyweft.engine.control.core import EngineCore
from pyweft.engine.messages.signals import SignalSender
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.records import TERMINAL_STATUSES
from pyweft.engine.schedules import events, planner
from pyweft.engine.schedules import records as srec
from pyweft.engine.schedules.records import ScheduleRecord
from pyweft.errors import CorruptRecordError, EngineDeposedError
from pyweft.observability import flow
from pyweft.storage.base import Delete, Expect, Op, Put, prefix_end

log = logging.getLogger("pyweft.schedules")

_BATCH = 256  # due entries handled per pass
_MAX_STEPS = 10_000  # changes to one schedule in one pass (catch-up "all", backfills)


def write_ops(old: ScheduleRecord | None, new: ScheduleRecord | None) -> list[Op]:
    """The writes that replace ``old`` by ``new`` (``None``: absent), due entry included."""
    ops: list[Op] = []
    moved = new is None or (old is not None and new.due_at != old.due_at)
    if old is not None and old.due_at is not None and moved:
        ops.append(Delete(key=srec.due_key(old.due_at, old.id)))
    if new is not None:
        ops.append(Put(key=srec.record_key(new.id), value=srec.encode(new)))
        if new.due_at is not None and (old is None or old.due_at != new.due_at):
            ops.append(Put(key=srec.due_key(new.due_at, new.id), value=b""))
    elif old is not None:
        ops.append(Delete(key=srec.record_key(old.id)))
    return ops


class Firing:
    """Fires this store's due schedules from this engine (see the module docstring)."""

    def __init__(self, core: EngineCore, signals: Callable[[], SignalSender]) -> None:
        self._core = core
        self._signals = signals
        self._timer: TimerHandle | None = None
        self._refresh: asyncio.TimerHandle | None = None
        self._armed_at: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._foreign: set[str] = set()  # schedules of workflow types not registered here
        self.running = False

    @property
    def recheck(self) -> float:
        return self._core.poll_interval

    def start(self) -> None:
        self.running = True
        self.kick()

    async def stop(self) -> None:
        self.running = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._refresh is not None:
            self._refresh.cancel()
            self._refresh = None
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    def kick(self) -> None:
        """Look at the store now (a pass, then re-arm): after any change to a schedule."""
        if not self.running:
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._pass())

    async def idle(self) -> None:
        """Wait until no pass is under way (for tests and the test kit)."""
        while self._task is not None and not self._task.done():
            await asyncio.gather(self._task, return_exceptions=True)

    @property
    def busy(self) -> bool:
        """A pass is under way (or due to start)."""
        return self._task is not None and not self._task.done()

    @property
    def next_wakeup(self) -> float | None:
        """When the armed timer fires (``None``: not armed)."""
        return self._armed_at if self.running else None

    async def _pass(self) -> None:
        while True:
            self._again = False
            try:
                await self._fire_due()
                await self._arm()
            except EngineDeposedError:
                return  # the engine is being torn down; nothing more is written here
            except Exception:
                log.exception("schedule pass failed; retrying at the next refresh")
                self._arm_at(self._core.clock.now() + self.recheck)  # retry, on the clock
            if not self._again or not self.running:
                return

    async def _fire_due(self) -> None:
        storage, now = self._core.storage, self._core.clock.now()
        end = srec.DUE_PREFIX + keys.ts16(now) + ";"
        rows = await storage.scan(srec.DUE_PREFIX, end=end, limit=_BATCH + len(self._foreign))
        for key, _ in rows:
            if not self.running:
                return
            _, schedule_id = srec.due_of(key)
            if schedule_id in self._foreign:
                continue
            await self.process(schedule_id, stale_key=key)

    async def _arm(self) -> None:
        if not self.running:
            return
        rows = await self._core.storage.scan(
            srec.DUE_PREFIX, end=prefix_end(srec.DUE_PREFIX), limit=1 + len(self._foreign)
        )
        when = None
        for key, _ in rows:
            due, schedule_id = srec.due_of(key)
            if schedule_id not in self._foreign:
                # A due key holds the due time rounded to the microsecond, possibly just
                # below the exact time the planner compares with (a jittered occurrence):
                # a pass at that instant finds nothing due yet, and re-arming at the same
                # past time would spin forever. Look again one microsecond later.
                now = self._core.clock.now()
                when = due if due > now else now + 1e-6
                break
        self._arm_at(when)

    def _arm_at(self, when: float | None) -> None:
        """The clock timer at ``when`` (the next due schedule), and the refresh.

        The refresh notices schedules changed by another process. Like the engine's
        other store polling it runs on real time (``poll_interval``), not the engine
        clock: a virtual clock holds a timer only when a schedule is due. A memory
        store is written by this process only, whose changes kick the loop: no refresh.
        """
        if not self.running:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._refresh is not None:
            self._refresh.cancel()
            self._refresh = None
        self._armed_at = when
        if when is not None:
            self._timer = self._core.clock.call_at(when, self.kick)
        if self._core.storage.capabilities.persistence != "ephemeral":
            self._refresh = asyncio.get_running_loop().call_later(self.recheck, self.kick)

    # --- one schedule ---------------------------------------------------------------

    async def process(self, schedule_id: str, *, stale_key: str | None = None) -> None:
        """Apply every change due to one schedule now, one CAS batch at a time."""
        core = self._core
        for _ in range(_MAX_STEPS):
            key = srec.record_key(schedule_id)
            raw = await core.storage.get(key)
            if raw is None:
                if stale_key is not None:  # left by a delete that raced a fire
                    await core.committer.commit([Delete(key=stale_key)])
                return
            try:
                record = srec.decode(raw, key=key)
            except CorruptRecordError:
                log.exception("schedule %r cannot be read; it is not fired", schedule_id)
                self._foreign.add(schedule_id)
                return
            if record.workflow_type not in core.workflows:
                self._foreign.add(schedule_id)  # an engine that has the code fires it
                return
            live = await self._live(record.running)
            change = planner.step(record, core.clock.now(), live, self.recheck)
            if change.start is None and change.record == record:
                if record.due_at is not None and record.due_at <= core.clock.now():
                    # Nothing to do yet due: never expected; set it aside rather than
                    # spin on it (doctor lists it as late).
                    log.error("schedule %r is due but has nothing to fire; skipped", schedule_id)
                    self._foreign.add(schedule_id)
                return
            landed = await self.apply(record, raw, change)
            if not landed:
                continue  # another engine changed it first: look again
            if change.record.missed > record.missed:
                new = change.record
                log.warning(
                    "schedule %r missed %d occurrence(s) from %s to %s while no engine ran "
                    "(catchup=%r); see engine.schedules.get(%r).last_missed",
                    schedule_id,
                    new.last_missed_count,
                    planner.stamp(new.last_missed_start),
                    planner.stamp(new.last_missed_end),
                    new.catchup,
                    schedule_id,
                )
            if change.done:
                return
        log.warning(
            "schedule %r still has work after %d changes; continuing later", schedule_id, _MAX_STEPS
        )

    async def _live(self, run_ids: list[str]) -> set[str]:
        if not run_ids:
            return set()
        raws = await asyncio.gather(*(self._core.storage.get(keys.wf(r)) for r in run_ids))
        live = set()
        for run_id, raw in zip(run_ids, raws, strict=True):
            if raw is None:
                continue
            try:
                status = records.decode_state(raw, key=keys.wf(run_id)).status
            except CorruptRecordError:
                continue
            if status not in TERMINAL_STATUSES:
                live.add(run_id)  # pending, running, suspended and blocked all count
        return live

    async def apply(
        self, old: ScheduleRecord, raw: bytes, change: planner.Change, how: str = "schedule"
    ) -> bool:
        """Commit ``change`` (and its run) if the record still holds ``raw``, then emit
        its events (``how`` names who asked for the occurrence: schedule or backfill)."""
        core = self._core
        ops = write_ops(old, change.record)
        conds = [Expect(key=srec.record_key(old.id), value=raw)]
        if change.start is None:
            landed = await core.committer.commit(ops, conds)
            if landed:
                events.outcome(core, old, change)
            return landed
        run_id = planner.run_id(old.id, change.start)
        _, created = await creation.create(
            core,
            self._signals(),
            old.workflow_type,
            (),
            id=run_id,
            on_conflict="use_existing",
            encoded_args=old.args,
            schedule=(old.id, change.start),
            extra=(ops, conds),
        )
        if not created:
            return await self._already_ran(old, raw, change, run_id)
        log.info("schedule %r started run %r", old.id, run_id)
        if hooks := flow.of(core.services):  # metrics: started, lag
            lag = core.clock.now() - change.start if how == "schedule" else None
            flow.schedule_fired(hooks, old.workflow_type, lag)
        events.outcome(core, old, change)
        events.fired(core, change.record, change.start, run_id, how)
        for previous in change.cancel:
            try:
                await core.cancel_run(previous)
            except Exception:
                log.exception("schedule %r could not cancel run %r", old.id, previous)
        return True

    async def _already_ran(
        self, old: ScheduleRecord, raw: bytes, change: planner.Change, run_id: str
    ) -> bool:
        """The create batch failed. Either the record changed (the caller re-reads it), or
        the occurrence's run exists already (a backfill or a trigger made it): then the
        schedule moves past the occurrence without starting it again."""
        storage = self._core.storage
        if await storage.get(srec.record_key(old.id)) != raw:
            return False
        if await storage.get(keys.wf(run_id)) is None:
            return False  # a claim race: the next look decides again
        moved = change.record
        moved.fired = old.fired
        landed = await self._core.committer.commit(
            write_ops(old, moved), [Expect(key=srec.record_key(old.id), value=raw)]
        )
        if landed:
            events.outcome(self._core, old, change)
        return landed
