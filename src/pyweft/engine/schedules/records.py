"""A schedule as stored, its keys, and the read-only view the API returns.

``sched:{id}`` holds the :class:`ScheduleRecord`; ``sched-due:{due16}:{id}``
indexes when it next needs the engine (its next occurrence plus jitter, or a
re-check of a buffered occurrence). Both change in the same conditional batch,
conditioned on the record's previous bytes, so every change to a schedule is a
compare-and-swap and its timer can never point somewhere stale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import msgspec

from pyweft.engine.replay import keys
from pyweft.engine.replay.info import to_datetime
from pyweft.engine.replay.records import corrupt

Overlap = Literal["skip", "buffer_one", "buffer_all", "cancel_previous", "allow_all"]
OVERLAPS: tuple[str, ...] = ("skip", "buffer_one", "buffer_all", "cancel_previous", "allow_all")
Catchup = Literal["latest", "all"]
CATCHUPS: tuple[str, ...] = ("latest", "all")

PREFIX = "sched:"
DUE_PREFIX = "sched-due:"


class ScheduleRecord(msgspec.Struct):
    id: str
    workflow_type: str
    args: bytes
    cron: str | None
    every: float | None
    timezone: str
    anchor: float  # intervals: occurrences are anchor + k * every, k >= 1
    overlap: str
    catchup: str
    catchup_window: float  # occurrences older than this are dropped as missed
    jitter: float
    start_at: float | None
    end_at: float | None
    paused: bool
    origin: str  # "api" (created at run time) or "code" (@workflow(schedule=...))
    created_at: float
    updated_at: float
    description: str | None = None
    next_nominal: float | None = None  # next occurrence not yet handled (None: finished)
    due_at: float | None = None  # when the engine must look again (the sched-due key)
    running: list[str] = []  # runs this schedule started that may still be going
    buffered: list[float] = []  # nominal times waiting for a run to finish
    last_nominal: float | None = None  # the latest occurrence that started a run
    last_run_id: str | None = None
    fired: int = 0
    skipped: int = 0  # occurrences the overlap policy dropped
    missed: int = 0  # occurrences missed while no engine ran (and not caught up), in all
    last_missed_count: int = 0  # how many the latest missed window held
    last_missed_start: float | None = None  # the latest window of missed occurrences
    last_missed_end: float | None = None


_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(ScheduleRecord)


def encode(record: ScheduleRecord) -> bytes:
    return _enc.encode(record)


def decode(raw: bytes, *, key: str) -> ScheduleRecord:
    try:
        return _dec.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise corrupt(key, "schedule", exc) from exc


def record_key(schedule_id: str) -> str:
    return PREFIX + keys.enc(schedule_id)


def due_key(due_at: float, schedule_id: str) -> str:
    return f"{DUE_PREFIX}{keys.ts16(due_at)}:{keys.enc(schedule_id)}"


def due_of(key: str) -> tuple[float, str]:
    """``(due time, schedule id)`` of a ``sched-due:`` key."""
    stamp, _, encoded = key[len(DUE_PREFIX) :].partition(":")
    return int(stamp) / 1e6, keys.dec(encoded)


@dataclass(frozen=True, kw_only=True, slots=True)
class MissedWindow:
    """Occurrences that passed while no engine ran, and were not run."""

    count: int
    start: datetime
    end: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleInfo:
    """A schedule as stored: what ``engine.schedules.get`` and ``list`` return."""

    id: str
    workflow_type: str
    cron: str | None
    every_s: float | None
    timezone: str
    overlap: str
    catchup: str
    catchup_window_s: float
    jitter_s: float
    start_at: datetime | None
    end_at: datetime | None
    paused: bool
    origin: str
    description: str | None
    created_at: datetime
    updated_at: datetime
    next_fire: datetime | None  # the next nominal occurrence (None: the schedule ended)
    last_fire: datetime | None  # the latest nominal occurrence that started a run
    last_run_id: str | None
    running: list[str] = field(default_factory=list)
    buffered: list[datetime] = field(default_factory=list)
    fired: int = 0
    skipped: int = 0
    missed: int = 0
    last_missed: MissedWindow | None = None

    @property
    def status(self) -> str:
        if self.paused:
            return "paused"
        return "active" if self.next_fire is not None or self.buffered else "finished"


def info(record: ScheduleRecord) -> ScheduleInfo:
    def dt(t: float | None) -> datetime | None:
        return None if t is None else to_datetime(t)

    missed = None
    if record.last_missed_start is not None and record.last_missed_end is not None:
        missed = MissedWindow(
            count=record.last_missed_count,
            start=to_datetime(record.last_missed_start),
            end=to_datetime(record.last_missed_end),
        )
    return ScheduleInfo(
        id=record.id,
        workflow_type=record.workflow_type,
        cron=record.cron,
        every_s=record.every,
        timezone=record.timezone,
        overlap=record.overlap,
        catchup=record.catchup,
        catchup_window_s=record.catchup_window,
        jitter_s=record.jitter,
        start_at=dt(record.start_at),
        end_at=dt(record.end_at),
        paused=record.paused,
        origin=record.origin,
        description=record.description,
        created_at=to_datetime(record.created_at),
        updated_at=to_datetime(record.updated_at),
        next_fire=dt(record.next_nominal),
        last_fire=dt(record.last_nominal),
        last_run_id=record.last_run_id,
        running=list(record.running),
        buffered=[to_datetime(t) for t in record.buffered],
        fired=record.fired,
        skipped=record.skipped,
        missed=record.missed,
        last_missed=missed,
    )
