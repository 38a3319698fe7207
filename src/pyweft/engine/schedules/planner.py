"""What a schedule does next: overlap, catch-up, buffers and jitter, as pure functions.

:func:`step` looks at a stored schedule, the time and which of its runs are still
going, and returns ONE change: the new record, at most one run to start and the
runs to cancel. The firing loop commits that change as one compare-and-swap batch
and calls :func:`step` again until nothing is left to do, so every decision is
made on the record as stored, whichever engine makes it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec

from pyweft.engine.schedules.records import ScheduleRecord
from pyweft.engine.schedules.spec import Cadence

MAX_BUFFERED = 1000  # buffer_all keeps at most this many waiting occurrences
MAX_TRACKED = 100  # allow_all: runs remembered as possibly still going
MAX_CATCHUP_SCAN = 100_000  # occurrences looked at to size one missed window


def cadence(record: ScheduleRecord) -> Cadence:
    return Cadence(
        cron=record.cron, every=record.every, timezone=record.timezone, anchor=record.anchor
    )


def jitter_of(schedule_id: str, nominal: float, jitter: float) -> float:
    """A stable offset in ``[0, jitter)`` for one occurrence: the same on every engine
    and after every restart, different between schedules that share a cadence."""
    if jitter <= 0:
        return 0.0
    digest = hashlib.sha256(f"{schedule_id}\x00{nominal:.6f}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * jitter


def stamp(t: float | None) -> str:
    """A nominal time as it appears in run ids: ``2026-03-29T00:30:00Z``."""
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_id(schedule_id: str, nominal: float) -> str:
    """The id of the run an occurrence starts: derived, so that engines racing to fire
    the same occurrence all try to create the same run, and only one can."""
    return f"{schedule_id}@{stamp(nominal)}"


def first_nominal(record: ScheduleRecord, after: float) -> float | None:
    """The first occurrence after ``after`` that the schedule's window allows."""
    low = after
    if record.start_at is not None and record.start_at > low:
        low = record.start_at - 1e-6  # start_at itself may be an occurrence
    found = cadence(record).next_after(low)
    if found is None or (record.end_at is not None and found > record.end_at):
        return None
    return found


def due_at(record: ScheduleRecord, now: float, recheck: float) -> float | None:
    """When the engine must look at the schedule again (``None``: never by itself)."""
    if record.paused:
        return None
    times = []
    if record.next_nominal is not None:
        times.append(record.next_nominal + jitter_of(record.id, record.next_nominal, record.jitter))
    if record.buffered:
        # A buffered occurrence waits for a run that may end in another engine.
        times.append(now + recheck)
    return min(times) if times else None


@dataclass(slots=True)
class Change:
    record: ScheduleRecord
    start: float | None = None  # nominal time of the occurrence whose run starts now
    cancel: list[str] = field(default_factory=list)
    done: bool = False  # nothing more to do until ``record.due_at``
    skipped: float | None = None  # an occurrence the overlap policy dropped
    buffered: float | None = None  # an occurrence the overlap policy queued


def step(record: ScheduleRecord, now: float, live: set[str], recheck: float) -> Change:
    """The next change to ``record`` at ``now``; ``live`` holds its runs still going."""
    rec = msgspec.structs.replace(
        record,
        running=[r for r in record.running if r in live],
        buffered=list(record.buffered),
    )
    if rec.paused:
        return _finish(rec, now, recheck)
    if rec.buffered and not rec.running:
        nominal = rec.buffered.pop(0)
        return _started(rec, nominal, now, recheck, [])
    nxt = rec.next_nominal
    if nxt is None or nxt + jitter_of(rec.id, nxt, rec.jitter) > now:
        return _finish(rec, now, recheck)
    chosen = _catch_up(rec, nxt, now)
    if chosen is None:
        return _finish(rec, now, recheck, more=True)
    return occurrence(rec, chosen, now, recheck)


def occurrence(rec: ScheduleRecord, nominal: float, now: float, recheck: float) -> Change:
    """Apply the overlap policy to one occurrence; the record moves past it."""
    rec.next_nominal = first_nominal(rec, nominal)
    return admit(rec, nominal, now, recheck)


def admit(rec: ScheduleRecord, nominal: float, now: float, recheck: float) -> Change:
    """The overlap policy's answer for ``nominal`` (without moving ``next_nominal``)."""
    if not rec.running or rec.overlap == "allow_all":
        return _started(rec, nominal, now, recheck, [])
    if rec.overlap == "cancel_previous":
        cancel, rec.running = list(rec.running), []
        return _started(rec, nominal, now, recheck, cancel)
    room = MAX_BUFFERED if rec.overlap == "buffer_all" else 1
    if rec.overlap in ("buffer_all", "buffer_one") and len(rec.buffered) < room:
        rec.buffered.append(nominal)
        change = _finish(rec, now, recheck, more=True)
        change.buffered = nominal
        return change
    rec.skipped += 1
    change = _finish(rec, now, recheck, more=True)
    change.skipped = nominal
    return change


def _catch_up(rec: ScheduleRecord, nxt: float, now: float) -> float | None:
    """Which due occurrence to handle now; records those skipped as missed.

    One due occurrence is simply handled (late or not). Several mean no engine ran
    through them: ``catchup="all"`` handles them one by one, oldest first;
    ``"latest"`` handles only the newest and records the others as one missed
    window. Either way, occurrences older than ``catchup_window`` are missed.
    """
    due = [nxt]
    for t in cadence(rec).occurrences(nxt, now, MAX_CATCHUP_SCAN):
        if rec.end_at is not None and t > rec.end_at:
            break
        if t + jitter_of(rec.id, t, rec.jitter) > now:
            break
        due.append(t)
    oldest_allowed = now - rec.catchup_window
    kept = [t for t in due if t >= oldest_allowed]
    if rec.catchup == "all":
        dropped = due[: len(due) - len(kept)]
        chosen = kept[0] if kept else None
    else:
        chosen = kept[-1] if kept else None
        dropped = due[:-1] if kept else due
    if dropped:
        rec.missed += len(dropped)
        rec.last_missed_count = len(dropped)
        rec.last_missed_start, rec.last_missed_end = dropped[0], dropped[-1]
    if chosen is None:
        rec.next_nominal = first_nominal(rec, due[-1])
    return chosen


def _started(
    rec: ScheduleRecord, nominal: float, now: float, recheck: float, cancel: list[str]
) -> Change:
    rid = run_id(rec.id, nominal)
    rec.running = [*rec.running, rid][-MAX_TRACKED:]
    rec.last_run_id = rid
    rec.last_nominal = nominal if rec.last_nominal is None else max(rec.last_nominal, nominal)
    rec.fired += 1
    rec.due_at = due_at(rec, now, recheck)
    return Change(record=rec, start=nominal, cancel=cancel)


def _finish(rec: ScheduleRecord, now: float, recheck: float, *, more: bool = False) -> Change:
    rec.due_at = due_at(rec, now, recheck)
    return Change(record=rec, done=not more)
