"""Persisted engine records and their binary codec (msgspec MessagePack).

These are the engine's own bookkeeping, not user payloads: user values are
stored as already-encoded ``bytes`` fields produced by the PayloadCodec.
Records are ``array_like`` for compactness and speed; new fields may only be
appended with defaults so older stores keep decoding.

Every ``decode_*`` function turns a record it cannot read (garbage bytes, a
truncated value, a field of the wrong type) into
:class:`~pyweft.errors.CorruptRecordError` naming the key, never a raw
``msgspec`` error: callers pass ``key=`` so that the error says which record
to look at, and recovery can set that one run aside (see ``quarantine``).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar, cast
from urllib.parse import unquote

import msgspec

from pyweft.engine.replay.drift import CodeDrift, DriftCall, DriftReason
from pyweft.errors import CorruptRecordError

T = TypeVar("T")

Status = Literal[
    "pending",
    "enqueued",
    "running",
    "suspended",
    "blocked",
    "completed",
    "failed",
    "cancelled",
    "timed_out",
]
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "timed_out"})
ALL_STATUSES: tuple[str, ...] = (
    "pending",
    "enqueued",  # waits in a workflow queue for a slot (``queue`` names it)
    "running",
    "suspended",
    "blocked",  # its code drifted: waits for code that replays it (``error`` says why)
    "completed",
    "failed",
    "cancelled",
    "timed_out",
)


class DriftSide(msgspec.Struct, array_like=True, frozen=True):
    """One side of a stored code drift (see ``engine/replay/drift.py``)."""

    kind: str | None
    name: str | None
    args: str | None = None
    detail: str | None = None


class DriftRecord(msgspec.Struct, array_like=True, frozen=True):
    """Where the code stopped replaying the journal, stored with the error that says so."""

    reason: str
    step: int | None
    recorded: DriftSide
    requested: DriftSide


class ErrorInfo(msgspec.Struct, array_like=True, frozen=True):
    """A failure, reduced to what survives a restart."""

    type: str
    message: str
    code: str | None = None
    traceback: str | None = None  # an activity's failure: the traceback text, as raised
    module: str | None = None  # the exception class as `module.QualName` (to rebuild it)
    category: str | None = None  # why a run failed (FAILURE_CATEGORIES); None: derive by type
    # A code drift (NonDeterminismError, VersionMismatchError): the diff as fields. Records
    # written before it was stored decode with None (the message still says it all).
    drift: DriftRecord | None = None

    @property
    def code_drift(self) -> CodeDrift | None:
        """``drift`` as the public :class:`~pyweft.CodeDrift`."""
        d = self.drift
        if d is None:
            return None
        return CodeDrift(
            reason=cast(DriftReason, d.reason),
            step=d.step,
            recorded=DriftCall(**msgspec.structs.asdict(d.recorded)),
            requested=DriftCall(**msgspec.structs.asdict(d.requested)),
        )


class WorkflowState(msgspec.Struct, array_like=True):
    id: str
    type: str
    version: str
    status: str
    args: bytes
    created_at: float
    updated_at: float
    result: bytes | None = None
    error: ErrorInfo | None = None
    cancel_requested: bool = False
    idempotency_key: str | None = None
    start_at: float | None = None  # a pending run starts then
    deadline: float | None = None  # execution_timeout: the run is timed out then
    generation: int = 0  # bumped by continue_as_new
    parent_id: str | None = None
    parent_close_policy: str | None = None
    depth: int = 0  # nesting depth of child workflows
    tags: list[str] = []
    forked_from: str | None = None
    forked_at_step: int | None = None
    ended_at: float | None = None
    generation_started_at: float = 0.0  # when continue_as_new began this generation
    schedule_id: str | None = None  # the schedule whose occurrence started this run
    nominal_time: float | None = None  # that occurrence's nominal time (before jitter)
    # Workflow queues: the queue the run was enqueued on, its waiting entry (while
    # ``enqueued``) and its slot (from dispatch until it ends); see ``engine/queues``.
    queue: str | None = None
    queue_wait_key: str | None = None
    queue_slot_key: str | None = None
    headers: dict[str, str] = {}  # context given at start (never secrets), passed to children


class StepRecord(msgspec.Struct, array_like=True):
    """One committed step. ``value`` is the encoded user payload when ``ok``."""

    step: int
    kind: str
    name: str
    ok: bool
    started_at: float
    finished_at: float
    attempts: int = 1
    value: bytes | None = None
    error: ErrorInfo | None = None


class PendingStep(msgspec.Struct, array_like=True):
    """Durable progress of a step that has not finished yet.

    For a sleep, ``deadline`` is when it ends. For an activity, ``attempt`` is
    the number of attempts that already failed, ``deadline`` when the next may
    start (the backoff), and ``first_started_at`` anchors the schedule-to-close
    budget.
    """

    step: int
    kind: str
    name: str
    deadline: float
    attempt: int = 0
    first_started_at: float = 0.0
    last_error: ErrorInfo | None = None
    ref: str | None = None  # e.g. the review id of an open review
    # An activity's latest heartbeat details (encoded user payload) and when they were
    # given: kept for the step's next attempt, deleted with the record when it ends.
    heartbeat: bytes | None = None
    heartbeat_at: float | None = None
    # A keyed activity: its idempotency key, written before an attempt is dispatched and
    # kept while that attempt's outcome is unknown (recovery verifies before running).
    dispatched_key: str | None = None


_enc = msgspec.msgpack.Encoder()
_state_dec = msgspec.msgpack.Decoder(WorkflowState)
_step_dec = msgspec.msgpack.Decoder(StepRecord)
_pending_dec = msgspec.msgpack.Decoder(PendingStep)

encode = _enc.encode

UNKNOWN_KEY = "(key not given)"


def workflow_id_of(key: str) -> str | None:
    """The run a stored key belongs to, for keys laid out per run (``wf:``, ``sig:``...)."""
    prefix, sep, rest = key.partition(":")
    if not sep or prefix not in _RUN_PREFIXES:
        return None
    return unquote(rest.split(":", 1)[0]) or None


_RUN_PREFIXES = frozenset(
    {"wf", "sig", "sigseq", "sigres", "upd", "upk", "upx", "qry", "qrs", "wake", "rvw", "q"}
)


REPAIR_ADVICE = (
    ". Run `pyweft doctor` to list every damaged key; restore the record from a backup, "
    "or purge the run"
)


def corrupt(key: str | None, what: str, exc: BaseException | str) -> CorruptRecordError:
    """The error for a stored ``what`` record at ``key`` that cannot be decoded."""
    shown = f"stored record {key!r}" if key else f"a stored {what} record"
    article = "an" if what[:1] in ("a", "e", "i", "o", "u") else "a"
    return CorruptRecordError(
        f"{shown} is damaged: it cannot be decoded as {article} {what} ({exc}){REPAIR_ADVICE}",
        key=key or UNKNOWN_KEY,
        workflow_id=workflow_id_of(key) if key else None,
    )


def _decode(decoder: msgspec.msgpack.Decoder[T], raw: bytes, key: str | None, what: str) -> T:
    try:
        return decoder.decode(raw)
    except (ValueError, TypeError, OverflowError) as exc:  # msgspec's errors are ValueErrors
        raise corrupt(key, what, exc) from exc


def decode_state(raw: bytes, *, key: str | None = None) -> WorkflowState:
    return _decode(_state_dec, raw, key, "workflow state")


def decode_step(raw: bytes, *, key: str | None = None) -> StepRecord:
    return _decode(_step_dec, raw, key, "journal entry")


def decode_pending(raw: bytes, *, key: str | None = None) -> PendingStep:
    return _decode(_pending_dec, raw, key, "open step")


def error_info(exc: BaseException) -> ErrorInfo:
    code = getattr(exc, "code", None)
    drift = getattr(exc, "drift", None)
    return ErrorInfo(
        type=type(exc).__name__,
        message=str(exc),
        code=code if isinstance(code, str) else None,
        category=category_of(exc),
        drift=drift_record(drift) if isinstance(drift, CodeDrift) else None,
    )


def drift_record(drift: CodeDrift) -> DriftRecord:
    def side(call: DriftCall) -> DriftSide:
        return DriftSide(kind=call.kind, name=call.name, args=call.args, detail=call.detail)

    return DriftRecord(
        reason=drift.reason,
        step=drift.step,
        recorded=side(drift.recorded),
        requested=side(drift.requested),
    )


# --- failure categories: why a run failed -------------------------------------------------

FAILURE_CATEGORIES: tuple[str, ...] = (
    "application",  # the workflow's or an activity's own code raised
    "timeout",  # an execution timeout, or an activity/wait/review timeout it did not catch
    "cancellation",  # cancelled, or a cancellation raised where it was not expected
    "resource",  # a limit: payload size, history length, nesting, memory
    "system",  # the engine or its store, a missing registration, a corrupt record
    "non_determinism",  # the code no longer replays the run's history
)
_CATEGORY_BY_TYPE: dict[str, str] = {
    **dict.fromkeys(
        (
            "ActivityTimeoutError",
            "WorkflowTimeoutError",
            "WaitTimeoutError",
            "ReviewTimeoutError",
            "UpdateTimeoutError",
            "TimeoutError",
        ),
        "timeout",
    ),
    **dict.fromkeys(
        ("CancelledError", "ActivityCancelledError", "WorkflowCancelledError"), "cancellation"
    ),
    **dict.fromkeys(("NonDeterminismError", "VersionMismatchError"), "non_determinism"),
    **dict.fromkeys(
        ("PayloadError", "HistoryLimitError", "MemoryError", "NestingLimitError", "RecursionError"),
        "resource",
    ),
    **dict.fromkeys(
        (
            "StorageError",
            "StorageClosedError",
            "StorageCapabilityError",
            "SchemaVersionError",
            "CorruptRecordError",
            "WorkflowNotRegisteredError",
            "ActivityNotRegisteredError",
            "LeaseNotHeldError",
            "EngineDeposedError",
            "ActivityReconciliationError",
        ),
        "system",
    ),
}
_STATUS_CATEGORY = {"timed_out": "timeout", "cancelled": "cancellation"}


def category_of(exc: BaseException) -> str:
    """The category of an exception: its own type's, else that of the first cause in its
    chain (``ActivityError`` and ``ChildWorkflowError`` keep theirs in ``cause``) that
    has one, else ``application``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found = _CATEGORY_BY_TYPE.get(type(current).__name__)
        if found is not None:
            return found
        cause = getattr(current, "cause", None)
        current = cause if isinstance(cause, BaseException) else current.__cause__
    return "application"


def failure_category(status: str, error: ErrorInfo | None) -> str | None:
    """Why a run ended as it did: ``None`` unless it failed, timed out, was cancelled or
    is blocked. Records written before categories were stored are classified by type."""
    if status in _STATUS_CATEGORY:
        return _STATUS_CATEGORY[status]
    if status not in ("failed", "blocked"):
        return None
    if error is None:
        return "non_determinism" if status == "blocked" else "application"
    if error.category in FAILURE_CATEGORIES:
        return error.category
    return _CATEGORY_BY_TYPE.get(error.type, "application")


class SignalRecord(msgspec.Struct, array_like=True):
    """A buffered signal, waiting to be consumed by ``ctx.wait_for_signal``."""

    name: str
    seq: int
    payload: bytes
    sent_at: float
    signal_id: str | None = None


class UpdateRequest(msgspec.Struct, array_like=True):
    """A persisted update request, waiting for a handler or ``ctx.wait_for_update``."""

    update_id: str
    name: str
    payload: bytes | None
    created_at: float
    idempotency_key: str | None = None


class UpdateResponse(msgspec.Struct, array_like=True):
    """The answer to an update: ``value`` when ``ok``, else ``error``."""

    update_id: str
    workflow_id: str
    ok: bool
    answered_at: float
    value: bytes | None = None
    error: ErrorInfo | None = None
    name: str = ""  # the update's name


class QueryRequest(msgspec.Struct, array_like=True):
    """A query asked by a process that does not drive the run, waiting for its owner."""

    query_id: str
    name: str
    args: bytes
    asked_at: float


class QueryResponse(msgspec.Struct, array_like=True):
    """The owner's answer to a :class:`QueryRequest`: ``value`` when ``ok``, else ``error``."""

    query_id: str
    ok: bool
    value: bytes | None = None
    error: ErrorInfo | None = None


class AppliedUpdate(msgspec.Struct, array_like=True):
    """An update (or signal) applied by an ``on_update`` (``on_signal``) handler at a step
    boundary; for a signal, ``update_id`` holds the signal's key.

    Replay calls the handler again with the same payload at the same boundary,
    so the workflow's in-memory state is rebuilt exactly.
    """

    boundary: int
    index: int
    update_id: str
    name: str
    payload: bytes | None
    applied_at: float = 0.0
    kind: str = "update"  # or "signal": a signal applied by an ``on_signal`` handler


class ReviewRecord(msgspec.Struct, array_like=True):
    """A human review request and, once made, its decision."""

    review_id: str
    workflow_id: str
    workflow_type: str
    step: int
    review_type: str
    artifact: bytes
    reviewers: list[str]
    created_at: float
    status: str = "pending"  # pending | approved | rejected | needs_changes | expired
    reviewer: str | None = None
    feedback: str | None = None
    decided_at: float | None = None
    deadline: float | None = None
    escalation_level: int = 0  # escalation steps already applied


_signal_dec = msgspec.msgpack.Decoder(SignalRecord)
_update_dec = msgspec.msgpack.Decoder(UpdateRequest)
_response_dec = msgspec.msgpack.Decoder(UpdateResponse)
_applied_dec = msgspec.msgpack.Decoder(AppliedUpdate)
_review_dec = msgspec.msgpack.Decoder(ReviewRecord)
_query_dec = msgspec.msgpack.Decoder(QueryRequest)
_query_response_dec = msgspec.msgpack.Decoder(QueryResponse)


def decode_signal(raw: bytes, *, key: str | None = None) -> SignalRecord:
    return _decode(_signal_dec, raw, key, "signal")


def decode_update(raw: bytes, *, key: str | None = None) -> UpdateRequest:
    return _decode(_update_dec, raw, key, "update request")


def decode_response(raw: bytes, *, key: str | None = None) -> UpdateResponse:
    return _decode(_response_dec, raw, key, "update response")


def decode_applied(raw: bytes, *, key: str | None = None) -> AppliedUpdate:
    return _decode(_applied_dec, raw, key, "applied update")


def decode_review(raw: bytes, *, key: str | None = None) -> ReviewRecord:
    return _decode(_review_dec, raw, key, "review")


def decode_query(raw: bytes, *, key: str | None = None) -> QueryRequest:
    return _decode(_query_dec, raw, key, "query request")


def decode_query_response(raw: bytes, *, key: str | None = None) -> QueryResponse:
    return _decode(_query_response_dec, raw, key, "query response")


_any_dec = msgspec.msgpack.Decoder()


def decode_attributes(raw: bytes, *, key: str | None = None) -> dict[str, Any]:
    value = _decode(_any_dec, raw, key, "search attributes")
    if not isinstance(value, dict):
        raise corrupt(key, "search attributes", f"a {type(value).__name__}, not a map")
    return value


def decode_version_pin(raw: bytes, *, key: str | None = None) -> int:
    """A ``ctx.get_version`` pin: the chosen version as decimal text."""
    try:
        return int(raw)
    except (ValueError, TypeError) as exc:
        raise corrupt(key, "version pin", exc) from exc
