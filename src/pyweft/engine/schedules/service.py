"""``engine.schedules``: create, read, change and fire schedules.

Every change is a compare-and-swap on the schedule's record, written with its
``sched-due:`` entry in one batch (see ``records`` and ``firing``); options are
checked completely before anything is read or written.
"""

from __future__ import annotations

import builtins
import logging
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

from pyweft.codec import encode_args, payload_size_error
from pyweft.durations import DurationLike, parse_duration, parse_timestamp
from pyweft.engine.control import creation
from pyweft.engine.control.core import EngineCore
from pyweft.engine.messages.signals import SignalSender
from pyweft.engine.replay import keys
from pyweft.engine.replay.events import EventKind
from pyweft.engine.replay.info import to_datetime
from pyweft.engine.schedules import events, planner, spec
from pyweft.engine.schedules import records as srec
from pyweft.engine.schedules.firing import Firing, write_ops
from pyweft.engine.schedules.records import CATCHUPS, OVERLAPS, ScheduleInfo, ScheduleRecord
from pyweft.errors import (
    InvalidDurationError,
    InvalidScheduleError,
    ScheduleAlreadyExistsError,
    ScheduleNotFoundError,
)
from pyweft.observability import flow
from pyweft.storage.base import Expect, prefix_end

log = logging.getLogger("pyweft.schedules")

MAX_SCHEDULE_ID_BYTES = 200  # leaves room for "@<nominal time>" inside a run id
DEFAULT_CATCHUP_WINDOW_S = 86400.0
MAX_BACKFILL = 10_000
_UNSET: Any = object()


def check_schedule_id(value: object) -> str:
    sid = keys.check_text(value, "schedule id", MAX_SCHEDULE_ID_BYTES)
    if "@" in sid:
        raise InvalidScheduleError(
            f"schedule id {sid!r} contains '@', which separates the schedule id from the "
            "occurrence time in the ids of the runs it starts; choose an id without '@'"
        )
    return sid


def _seconds(value: DurationLike, what: str) -> float:
    try:
        return parse_duration(value, field=what)
    except InvalidDurationError as exc:
        raise InvalidScheduleError(str(exc)) from exc


def _moment(value: datetime | float | None, what: str) -> float | None:
    if value is None:
        return None
    return parse_timestamp(value, field=what, error=InvalidScheduleError)


def _cadence(cron: str | None, every: DurationLike | None) -> tuple[str | None, float | None]:
    if (cron is None) == (every is None):
        raise InvalidScheduleError(
            "give exactly one of cron= (e.g. '0 9 * * MON-FRI') or every= (e.g. '15m')"
        )
    if cron is not None:
        return spec.check_cron(cron), None
    assert every is not None
    return None, spec.interval_seconds(_seconds(every, "every"))


def _options(
    overlap: str, catchup: str, catchup_window: DurationLike, jitter: DurationLike
) -> tuple[float, float]:
    if overlap not in OVERLAPS:
        raise InvalidScheduleError(f"overlap must be one of {', '.join(OVERLAPS)}; got {overlap!r}")
    if catchup not in CATCHUPS:
        raise InvalidScheduleError(f"catchup must be one of {', '.join(CATCHUPS)}; got {catchup!r}")
    window = _seconds(catchup_window, "catchup_window")
    if window < 1:
        raise InvalidScheduleError(f"catchup_window must be at least 1 second, got {window!r}")
    return window, _seconds(jitter, "jitter")


def _window(start_at: float | None, end_at: float | None) -> None:
    if start_at is not None and end_at is not None and end_at <= start_at:
        raise InvalidScheduleError("end_at must be after start_at")


class Schedules:
    """Schedules on this engine's store: ``engine.schedules``."""

    def __init__(self, core: EngineCore, signals: Callable[[], SignalSender]) -> None:
        self._core = core
        self._signals = signals
        self.firing = Firing(core, signals)

    # --- creating -------------------------------------------------------------------

    async def create(
        self,
        schedule_id: str,
        wf: Callable[..., Any] | str,
        *args: Any,
        cron: str | None = None,
        every: DurationLike | None = None,
        timezone: str = "UTC",
        overlap: str = "skip",
        catchup: str = "latest",
        catchup_window: DurationLike = DEFAULT_CATCHUP_WINDOW_S,
        jitter: DurationLike = 0.0,
        start_at: datetime | float | None = None,
        end_at: datetime | float | None = None,
        paused: bool = False,
        description: str | None = None,
        origin: str = "api",
    ) -> ScheduleInfo:
        """Store a new schedule that starts ``wf(*args)`` at every occurrence."""
        core = self._core
        core.services_or_raise()
        sid = check_schedule_id(schedule_id)
        definition = core.definition(wf)
        cron_text, interval = _cadence(cron, every)
        zone = spec.check_timezone(timezone)
        window, jitter_s = _options(overlap, catchup, catchup_window, jitter)
        begin, end = _moment(start_at, "start_at"), _moment(end_at, "end_at")
        _window(begin, end)
        if description is not None and not isinstance(description, str):
            raise InvalidScheduleError(f"description must be a string, got {description!r}")
        definition.check_arguments(args)
        payload = encode_args(core.codec, args)
        if len(payload) > core.max_payload_bytes:
            raise payload_size_error(
                len(payload), core.max_payload_bytes, what=f"arguments of schedule {sid!r}"
            )
        now = core.clock.now()
        record = ScheduleRecord(
            id=sid,
            workflow_type=definition.name,
            args=payload,
            cron=cron_text,
            every=interval,
            timezone=zone,
            anchor=begin - (interval or 0.0) if begin is not None and interval else now,
            overlap=overlap,
            catchup=catchup,
            catchup_window=window,
            jitter=jitter_s,
            start_at=begin,
            end_at=end,
            paused=bool(paused),
            origin=origin,
            created_at=now,
            updated_at=now,
            description=description,
        )
        record.next_nominal = planner.first_nominal(record, now)
        record.due_at = planner.due_at(record, now, self.firing.recheck)
        key = srec.record_key(sid)
        ok = await core.committer.commit(write_ops(None, record), [Expect(key=key, value=None)])
        if not ok:
            raise ScheduleAlreadyExistsError(
                f"a schedule with id {sid!r} already exists; choose another id, or change it "
                "with engine.schedules.update",
                schedule_id=sid,
            )
        self.firing.kick()
        events.emit(core, "schedule_created", record, origin=origin, paused=record.paused)
        return srec.info(record)

    # --- reading --------------------------------------------------------------------

    async def _load(self, schedule_id: str) -> tuple[ScheduleRecord, bytes]:
        self._core.services_or_raise()
        sid = check_schedule_id(schedule_id)
        key = srec.record_key(sid)
        raw = await self._core.storage.get(key)
        if raw is None:
            raise ScheduleNotFoundError(
                f"no schedule with id {sid!r}; list them with engine.schedules.list() "
                "or `pyweft schedules list`",
                schedule_id=sid,
            )
        return srec.decode(raw, key=key), raw

    async def get(self, schedule_id: str) -> ScheduleInfo:
        """The stored schedule; :class:`ScheduleNotFoundError` for an unknown id."""
        record, _ = await self._load(schedule_id)
        return srec.info(record)

    async def list(
        self, *, workflow_type: str | None = None, paused: bool | None = None
    ) -> builtins.list[ScheduleInfo]:
        """Every schedule (optionally of one workflow type, or only (un)paused), by id."""
        self._core.services_or_raise()
        out: builtins.list[ScheduleInfo] = []
        start: str | None = None
        while True:
            rows = await self._core.storage.scan(
                srec.PREFIX, start=start, end=prefix_end(srec.PREFIX), limit=512
            )
            for key, raw in rows:
                record = srec.decode(raw, key=key)
                if workflow_type is not None and record.workflow_type != workflow_type:
                    continue
                if paused is not None and record.paused != paused:
                    continue
                out.append(srec.info(record))
            if len(rows) < 512:
                return out
            start = keys.after(rows[-1][0])

    async def preview(self, schedule_id: str, count: int = 5) -> builtins.list[datetime]:
        """The next ``count`` nominal fire times from now (jitter not added)."""
        if type(count) is not int or not 1 <= count <= 1000:
            raise InvalidScheduleError(f"count must be an int in 1..1000, got {count!r}")
        record, _ = await self._load(schedule_id)
        out: builtins.list[datetime] = []
        t = record.next_nominal
        while t is not None and len(out) < count:
            out.append(to_datetime(t))
            t = planner.first_nominal(record, t)
        return out

    async def late(self, threshold: DurationLike = 60.0) -> builtins.list[ScheduleInfo]:
        """Active schedules whose next due time passed more than ``threshold`` ago (no
        engine that registers their workflow is firing them)."""
        self._core.services_or_raise()
        limit = self._core.clock.now() - _seconds(threshold, "threshold")
        rows = await self._core.storage.scan(
            srec.DUE_PREFIX, end=srec.DUE_PREFIX + keys.ts16(limit) + ";"
        )
        out = []
        for key, _ in rows:
            try:
                out.append(await self.get(srec.due_of(key)[1]))
            except ScheduleNotFoundError:
                continue
        return out

    # --- changing -------------------------------------------------------------------

    async def _change(
        self,
        schedule_id: str,
        edit: Callable[[ScheduleRecord, float], None],
        kind: EventKind,
    ) -> ScheduleInfo:
        """Read, edit and compare-and-swap the record, retrying when another writer won."""
        core = self._core
        while True:
            old, raw = await self._load(schedule_id)
            now = core.clock.now()
            new = msgspec.structs.replace(
                old, running=list(old.running), buffered=list(old.buffered)
            )
            edit(new, now)
            new.updated_at = now
            new.due_at = planner.due_at(new, now, self.firing.recheck)
            key = srec.record_key(old.id)
            if await core.committer.commit(write_ops(old, new), [Expect(key=key, value=raw)]):
                self.firing.kick()
                if kind == "schedule_paused" and len(old.buffered) > 0:
                    events.emit(
                        core, "schedule_skipped", new, dropped=len(old.buffered), reason="paused"
                    )
                events.emit(core, kind, new, origin=new.origin)
                return srec.info(new)

    async def update(
        self,
        schedule_id: str,
        *,
        cron: str | None = None,
        every: DurationLike | None = None,
        timezone: str | None = None,
        overlap: str | None = None,
        catchup: str | None = None,
        catchup_window: DurationLike | None = None,
        jitter: DurationLike | None = None,
        start_at: datetime | float | None = _UNSET,
        end_at: datetime | float | None = _UNSET,
        description: str | None = _UNSET,
    ) -> ScheduleInfo:
        """Change a schedule's options; omitted ones keep their values. A paused schedule
        stays paused. A new cron or interval takes effect from now (intervals are
        re-anchored at the update). Its workflow and arguments cannot change: delete it
        and create another."""
        cadence = None if cron is None and every is None else _cadence(cron, every)
        zone = None if timezone is None else spec.check_timezone(timezone)
        if overlap is not None and overlap not in OVERLAPS:
            raise InvalidScheduleError(f"overlap must be one of {', '.join(OVERLAPS)}")
        if catchup is not None and catchup not in CATCHUPS:
            raise InvalidScheduleError(f"catchup must be one of {', '.join(CATCHUPS)}")
        window = None if catchup_window is None else _seconds(catchup_window, "catchup_window")
        if window is not None and window < 1:
            raise InvalidScheduleError("catchup_window must be at least 1 second")
        jitter_s = None if jitter is None else _seconds(jitter, "jitter")
        begin: Any = _UNSET if start_at is _UNSET else _moment(start_at, "start_at")
        end: Any = _UNSET if end_at is _UNSET else _moment(end_at, "end_at")
        if description is not _UNSET and not isinstance(description, str | None):
            raise InvalidScheduleError(f"description must be a string, got {description!r}")

        def edit(rec: ScheduleRecord, now: float) -> None:
            if cadence is not None:
                rec.cron, rec.every = cadence
                rec.anchor = now
            if zone is not None:
                rec.timezone = zone
            if overlap is not None:
                rec.overlap = overlap
            if catchup is not None:
                rec.catchup = catchup
            if window is not None:
                rec.catchup_window = window
            if jitter_s is not None:
                rec.jitter = jitter_s
            if begin is not _UNSET:
                rec.start_at = begin
            if end is not _UNSET:
                rec.end_at = end
            _window(rec.start_at, rec.end_at)
            if description is not _UNSET:
                rec.description = description
            if cadence is not None or zone is not None or begin is not _UNSET or end is not _UNSET:
                rec.next_nominal = planner.first_nominal(rec, now)

        return await self._change(schedule_id, edit, "schedule_updated")

    async def pause(self, schedule_id: str) -> ScheduleInfo:
        """Stop firing (buffered occurrences are dropped); ``resume`` continues from now."""

        def edit(rec: ScheduleRecord, now: float) -> None:
            rec.paused = True
            rec.skipped += len(rec.buffered)
            rec.buffered = []

        return await self._change(schedule_id, edit, "schedule_paused")

    async def resume(self, schedule_id: str) -> ScheduleInfo:
        """Fire again, from the next occurrence after now (the paused ones are not run)."""

        def edit(rec: ScheduleRecord, now: float) -> None:
            if rec.paused:
                rec.paused = False
                rec.next_nominal = planner.first_nominal(rec, now)

        return await self._change(schedule_id, edit, "schedule_resumed")

    async def delete(self, schedule_id: str) -> None:
        """Remove the schedule. Runs it started keep their provenance."""
        core = self._core
        while True:
            old, raw = await self._load(schedule_id)
            key = srec.record_key(old.id)
            if await core.committer.commit(write_ops(old, None), [Expect(key=key, value=raw)]):
                events.emit(core, "schedule_deleted", old, origin=old.origin)
                return

    async def trigger(self, schedule_id: str) -> str:
        """Start one run now, outside the cadence (its nominal time is now). Returns the
        run id. The overlap policy does not apply: an explicit request always runs."""
        core = self._core
        while True:
            old, raw = await self._load(schedule_id)
            now = core.clock.now()
            run_id = f"{old.id}@manual-{uuid.uuid4().hex[:12]}"
            new = msgspec.structs.replace(old, running=[*old.running, run_id][-100:])
            new.last_run_id = run_id
            new.fired += 1
            key = srec.record_key(old.id)
            _, created = await creation.create(
                core,
                self._signals(),
                old.workflow_type,
                (),
                id=run_id,
                on_conflict="use_existing",
                encoded_args=old.args,
                schedule=(old.id, now),
                extra=(write_ops(old, new), [Expect(key=key, value=raw)]),
            )
            if created:
                events.fired(core, new, now, run_id, "trigger")
                # Counted as started by metrics (no lag: it runs at once, on request).
                flow.schedule_fired(flow.of(core.services), old.workflow_type, None)
                return run_id

    async def backfill(
        self, schedule_id: str, start: datetime | float, end: datetime | float
    ) -> int:
        """Run every occurrence in ``[start, end]`` (a past window), oldest first, under
        the schedule's overlap policy. An occurrence that already has its run is not
        run again. Returns how many runs were started."""
        begin = _moment(start, "start")
        until = _moment(end, "end")
        assert begin is not None and until is not None
        if until < begin:
            raise InvalidScheduleError("backfill end must not be before its start")
        if until > self._core.clock.now():
            raise InvalidScheduleError(
                "backfill end is in the future; backfill covers past occurrences (the "
                "schedule fires future ones itself)"
            )
        record, _ = await self._load(schedule_id)
        times = list(planner.cadence(record).occurrences(begin - 1e-6, until, MAX_BACKFILL + 1))
        if len(times) > MAX_BACKFILL:
            raise InvalidScheduleError(
                f"the window holds more than {MAX_BACKFILL} occurrences; backfill it in parts"
            )
        started = 0
        for nominal in times:
            started += await self._backfill_one(record.id, nominal)
        return started

    async def _backfill_one(self, schedule_id: str, nominal: float) -> int:
        firing = self.firing
        storage = self._core.storage
        while True:
            if await storage.get(keys.wf(planner.run_id(schedule_id, nominal))) is not None:
                return 0  # this occurrence already ran (or runs)
            old, raw = await self._load(schedule_id)
            live = await firing._live(old.running)
            rec = msgspec.structs.replace(
                old, running=[r for r in old.running if r in live], buffered=list(old.buffered)
            )
            change = planner.admit(rec, nominal, self._core.clock.now(), firing.recheck)
            if change.start is None and change.record == old:
                return 0
            if await firing.apply(old, raw, change, how="backfill"):
                firing.kick()
                return 1 if change.start is not None else 0
