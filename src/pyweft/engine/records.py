"""Persisted engine records and their binary codec (msgspec MessagePack).

These are the engine's own bookkeeping, not user payloads: user values are
stored as already-encoded ``bytes`` fields produced by the PayloadCodec.
Records are ``array_like`` for compactness and speed; new fields may only be
appended with defaults so older stores keep decoding.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Status = Literal["pending", "running", "suspended", "completed", "failed", "cancelled", "timed_out"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "timed_out"})
ALL_STATUSES: tuple[str, ...] = (
    "pending",
    "running",
    "suspended",
    "completed",
    "failed",
    "cancelled",
    "timed_out",
)


class ErrorInfo(msgspec.Struct, array_like=True, frozen=True):
    """A failure, reduced to what survives a restart."""

    type: str
    message: str
    code: str | None = None


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


_enc = msgspec.msgpack.Encoder()
_state_dec = msgspec.msgpack.Decoder(WorkflowState)
_step_dec = msgspec.msgpack.Decoder(StepRecord)
_pending_dec = msgspec.msgpack.Decoder(PendingStep)

encode = _enc.encode


def decode_state(raw: bytes) -> WorkflowState:
    return _state_dec.decode(raw)


def decode_step(raw: bytes) -> StepRecord:
    return _step_dec.decode(raw)


def decode_pending(raw: bytes) -> PendingStep:
    return _pending_dec.decode(raw)


def error_info(exc: BaseException) -> ErrorInfo:
    code = getattr(exc, "code", None)
    return ErrorInfo(
        type=type(exc).__name__,
        message=str(exc),
        code=code if isinstance(code, str) else None,
    )


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
    """An update applied by an ``on_update`` handler at a step boundary.

    Replay calls the handler again with the same payload at the same boundary,
    so the workflow's in-memory state is rebuilt exactly.
    """

    boundary: int
    index: int
    update_id: str
    name: str
    payload: bytes | None
    applied_at: float = 0.0


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

decode_signal = _signal_dec.decode
decode_update = _update_dec.decode
decode_response = _response_dec.decode
decode_applied = _applied_dec.decode
decode_review = _review_dec.decode
decode_query = _query_dec.decode
decode_query_response = _query_response_dec.decode


_any_dec = msgspec.msgpack.Decoder()


def decode_attributes(raw: bytes) -> dict[str, Any]:
    value = _any_dec.decode(raw)
    return value if isinstance(value, dict) else {}
