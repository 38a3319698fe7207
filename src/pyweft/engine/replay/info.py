"""Read-only views of runs returned by the public API."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from pyweft.engine.replay.drift import CodeDrift
from pyweft.engine.replay.records import ErrorInfo
from pyweft.engine.replay.records import failure_category as _category

T = TypeVar("T")


# Stand-ins for stored times no datetime can hold (inf, nan, 1e300 written by an older
# version). A day inside datetime's range, so that converting to local time still works.
FAR_FUTURE = datetime(9999, 12, 30, tzinfo=UTC)
FAR_PAST = datetime(1, 1, 2, tzinfo=UTC)


def to_datetime(t: float) -> datetime:
    """Epoch seconds as an aware datetime; never raises, whatever was stored.

    A time outside datetime's range becomes :data:`FAR_FUTURE` or
    :data:`FAR_PAST` (NaN counts as the past): readers show it as an invalid
    time instead of crashing (see :func:`is_out_of_range`).
    """
    try:
        return datetime.fromtimestamp(t, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return FAR_FUTURE if t > 0 else FAR_PAST


def is_out_of_range(moment: datetime) -> bool:
    """Whether ``moment`` stands for a stored time that was out of range (see above)."""
    return moment >= FAR_FUTURE or moment <= FAR_PAST


@dataclass(frozen=True, kw_only=True, slots=True)
class RunInfo:
    """What a workflow knows about its own run (``ctx.info``), the same on every replay.

    It holds only what was fixed when the run (or its current generation) began;
    live state such as the status or the step count is ``engine.describe``'s job.
    """

    workflow_id: str
    workflow_type: str
    version: str  # the definition version the run was started under
    created_at: datetime
    generation: int  # 0, plus one for each continue_as_new
    generation_started_at: datetime  # when this generation began (created_at for the first)
    parent_id: str | None
    depth: int  # 0 for a top-level run, 1 for its children, and so on
    tags: tuple[str, ...]
    execution_deadline: datetime | None  # when execution_timeout times the run out
    idempotency_key: str | None
    forked_from: str | None
    forked_at_step: int | None
    schedule_id: str | None = None  # the schedule that started this run, if any
    nominal_time: datetime | None = None  # that occurrence's nominal time (before jitter)


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleOrigin:
    """Which schedule occurrence started a run (``WorkflowInfo.schedule``)."""

    schedule_id: str
    nominal_time: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkflowInfo:
    """A run as stored: what ``describe`` and ``list`` return."""

    id: str
    workflow_type: str
    version: str
    status: str
    created_at: datetime
    updated_at: datetime
    step_count: int | None = None
    result: Any = None
    error: ErrorInfo | None = None
    cancel_requested: bool = False
    parent_id: str | None = None
    tags: list[str] = field(default_factory=list)
    attributes: dict[str, Any] | None = None  # filled by describe(), not by list()
    forked_from: str | None = None
    forked_at_step: int | None = None
    last_step_at: datetime | None = None  # filled by describe(): when the latest step finished
    # A record of the run cannot be decoded: status is "quarantined", error says why, and
    # corrupt_key names the record (docs/concepts/recovery.md, "Damaged records").
    corrupt_key: str | None = None
    # Filled by describe(): step -> latest stored heartbeat details of each activity in
    # flight that heartbeated with details (the live "activity progress").
    heartbeats: dict[int, Any] | None = None
    schedule: ScheduleOrigin | None = None  # set when a schedule occurrence started the run
    queue: str | None = None  # the workflow queue the run was enqueued on
    # Its code drifted (a blocked run, or one failed by on_nondeterminism="fail_run"): the
    # step, what the journal recorded and what the code asked for. None for records
    # stored before drifts were kept as fields (``error.message`` still says it).
    drift: CodeDrift | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in {"completed", "failed", "cancelled", "timed_out"}

    @property
    def failure_category(self) -> str | None:
        """Why the run failed, timed out, was cancelled or is blocked: ``application``,
        ``timeout``, ``cancellation``, ``resource``, ``system`` or ``non_determinism``."""
        return _category(self.status, self.error)

    @property
    def quarantined(self) -> bool:
        """The run is set aside because a stored record of it cannot be decoded."""
        return self.corrupt_key is not None


@dataclass(frozen=True, kw_only=True, slots=True)
class StepInfo:
    """One step of a run's history (committed steps and the open ones)."""

    step: int
    kind: str
    name: str
    status: str  # "completed" | "failed" | "open"
    attempts: int
    started_at: datetime
    finished_at: datetime | None
    result: Any = None
    error: ErrorInfo | None = None
    next_attempt_at: datetime | None = None
    # An activity in flight: the details of its latest stored heartbeat, and when.
    heartbeat_details: Any = None
    heartbeat_at: datetime | None = None

    @property
    def duration_s(self) -> float | None:
        if self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


@dataclass(frozen=True, kw_only=True, slots=True)
class Page(Generic[T]):
    """One page of a listing; pass ``next_cursor`` back to get the next page."""

    items: list[T] = field(default_factory=list)
    next_cursor: str | None = None
