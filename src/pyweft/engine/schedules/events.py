"""Schedule events on the engine's event bus (``engine.events()``).

Emitted after the write they describe has committed, like every engine event
(best effort, in this process only). An event about one run (``schedule_fired``)
carries that run's id as ``workflow_id``; the others are about the schedule and
carry ``workflow_id=""``. Every one names its schedule in ``data["schedule_id"]``;
times in ``data`` are UTC ISO strings (``2030-01-01T09:00:00Z``), the form used in
the ids of the runs a schedule starts, so they survive the server's JSON feeds.
"""

from __future__ import annotations

from typing import Any

from pyweft.engine.control.core import EngineCore
from pyweft.engine.replay.events import EventKind, WorkflowEvent
from pyweft.engine.replay.info import to_datetime
from pyweft.engine.schedules import planner
from pyweft.engine.schedules.records import ScheduleRecord


def emit(
    core: EngineCore,
    kind: EventKind,
    record: ScheduleRecord,
    *,
    workflow_id: str = "",
    **data: Any,
) -> None:
    """Emit ``kind`` about ``record`` (a no-op when nobody listens)."""
    if not core.events.active:
        return
    core.events.emit(
        WorkflowEvent(
            kind=kind,
            workflow_id=workflow_id,
            workflow_type=record.workflow_type,
            at=to_datetime(core.clock.now()),
            data={"schedule_id": record.id, **data},
        )
    )


def fired(core: EngineCore, record: ScheduleRecord, nominal: float, run_id: str, how: str) -> None:
    """A run was started for an occurrence (``how``: "schedule", "backfill", "trigger")."""
    emit(
        core,
        "schedule_fired",
        record,
        workflow_id=run_id,
        nominal_time=planner.stamp(nominal),
        run_id=run_id,
        how=how,
    )


def outcome(core: EngineCore, old: ScheduleRecord, change: planner.Change) -> None:
    """The events a committed change implies beyond a start: skips, buffering, misses."""
    new = change.record
    if change.skipped is not None:
        emit(
            core,
            "schedule_skipped",
            new,
            nominal_time=planner.stamp(change.skipped),
            overlap=new.overlap,
            running=list(new.running),
        )
    if change.buffered is not None:
        emit(
            core,
            "schedule_buffered",
            new,
            nominal_time=planner.stamp(change.buffered),
            overlap=new.overlap,
            waiting=len(new.buffered),
        )
    if new.missed > old.missed:
        emit(
            core,
            "schedule_missed",
            new,
            count=new.last_missed_count,
            window_start=planner.stamp(new.last_missed_start),
            window_end=planner.stamp(new.last_missed_end),
            catchup=new.catchup,
            missed_total=new.missed,
        )
