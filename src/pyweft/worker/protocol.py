"""The remote worker protocol: the JSON frames on ``/api/v1/tasks/{queue}/stream``.

Every frame is a JSON object with a ``type``. The structs below are the only
definition: the server decodes each incoming frame with them (a frame that does
not fit is refused before anything is stored), ``RemoteWorker`` decodes the
server's with them, and :func:`protocol_schema` derives the published JSON Schema
(``pyweft/server/schemas/task-protocol.json`` in the package, served at
``GET /api/v1/tasks/protocol``). See
``docs/guides/remote-workers.md`` for the conversation they make up.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import msgspec

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS = (1,)
SCHEMA_ID = "https://pyweft.dev/schemas/task-protocol-v1.json"

WorkerId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:@-]{1,128}$")]
SessionId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{16,64}$")]
ActivityName = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
QueueName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
OperationId = Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]
AttemptToken = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Text = Annotated[str, msgspec.Meta(max_length=65536)]


class _Frame(msgspec.Struct, tag_field="type", rename="camel", forbid_unknown_fields=True):
    pass


# --- worker -> server ---------------------------------------------------------------


class HeldAttempt(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """An attempt a reconnecting worker still runs (or holds an unacknowledged result of)."""

    operation_id: OperationId
    attempt_token: AttemptToken


class Register(_Frame, tag="register"):
    """The first frame. ``sessionId`` (from an earlier ``registerAck``) resumes a session
    whose socket dropped, within the reconnect grace; ``inFlight`` lists what the
    worker still has of it. ``queues`` adds queues to the one in the URL."""

    protocol_version: int
    activities: Annotated[list[ActivityName], msgspec.Meta(min_length=1, max_length=1000)]
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 10
    worker_id: WorkerId | None = None
    session_id: SessionId | None = None
    queues: Annotated[list[QueueName], msgspec.Meta(max_length=64)] = []
    in_flight: Annotated[list[HeldAttempt], msgspec.Meta(max_length=1000)] = []
    sdk: Annotated[str, msgspec.Meta(max_length=200)] | None = None


class Heartbeat(_Frame, tag="heartbeat"):
    """I am alive: keeps the claims on every attempt this session holds."""

    worker_id: WorkerId | None = None  # ignored: the socket says who is speaking


class TaskError(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    """Why an attempt failed. ``type`` is what retry policies match by name;
    ``timeoutKind`` (``attempt`` or ``heartbeat``) reports a limit the worker enforced."""

    message: Text
    type: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] = "Error"
    non_retryable: bool = False
    timeout_kind: Literal["attempt", "heartbeat"] | None = None
    stack: Text | None = None


class TaskResult(_Frame, tag="taskResult"):
    """The outcome of one attempt. ``completed``: ``value`` is its JSON result;
    ``failed``: ``error`` says why (the retry policy decides); ``cancelled``: the worker
    stopped it (after a ``cancel``, or while shutting down: then it goes back to the
    queue as the same attempt); ``rejected``: this worker cannot run it (an activity it
    does not have): it goes back for another worker, with ``error`` recorded."""

    operation_id: OperationId
    attempt_token: AttemptToken
    status: Literal["completed", "failed", "cancelled", "rejected"]
    value: Any = None
    error: Text | TaskError | None = None


class Drain(_Frame, tag="drain"):
    """Send me no more tasks (the worker is stopping); what it runs still reports."""


WorkerFrame = Register | Heartbeat | TaskResult | Drain

# --- server -> worker ---------------------------------------------------------------


class RegisterAck(_Frame, tag="registerAck"):
    protocol_version: int
    worker_id: WorkerId
    session_id: SessionId
    queues: list[QueueName]
    activities: list[ActivityName]
    concurrency: int
    heartbeat_interval_ms: int
    reconnect_grace_ms: int
    resumed: list[OperationId] = []  # the attempts of the session this socket took over


class RegisterError(_Frame, tag="registerError"):
    """The registration is refused; the server then closes with 1008."""

    code: Literal["invalid_registration", "unsupported_protocol_version", "duplicate_worker_id"]
    message: Text
    supported_protocol_versions: list[int]
    requested_protocol_version: int | None = None


class Task(_Frame, tag="task"):
    """Run one attempt. ``input`` is the JSON array of the activity's arguments. Echo
    ``operationId`` and ``attemptToken`` in its ``taskResult``."""

    operation_id: OperationId
    attempt_token: AttemptToken
    activity_name: ActivityName
    input: list[Any]
    attempt: int
    queue: QueueName
    workflow_id: str
    workflow_type: str
    step: int
    generation: int
    execution_token: str
    scheduled_at_ms: float
    visibility_timeout_ms: int
    timeout_ms: int | None = None
    heartbeat_timeout_ms: int | None = None
    headers: dict[str, str] | None = None


class Cancel(_Frame, tag="cancel"):
    """Stop this attempt (the run no longer waits for it); its result will be refused."""

    operation_id: OperationId
    attempt_token: AttemptToken
    reason: Text


class ResultAck(_Frame, tag="resultAck"):
    """The result is stored (or, for ``cancelled``/``rejected``, the task went back)."""

    operation_id: OperationId
    attempt_token: AttemptToken


class ResultRejected(_Frame, tag="resultRejected"):
    """The result was refused and nothing was stored: ``stale`` (this socket no longer
    holds that attempt: its claim was lost or the token does not match) or ``invalid``
    (the value cannot be stored)."""

    operation_id: OperationId
    attempt_token: AttemptToken
    code: Literal["stale", "invalid"]
    message: Text


class Shutdown(_Frame, tag="shutdown"):
    """Finish what you run within ``drainTimeoutMs``, report the rest ``cancelled``,
    then close the socket (1000). No new tasks come."""

    reason: Text
    drain_timeout_ms: int


class ProtocolError(_Frame, tag="protocolError"):
    """A frame broke the protocol; the server then closes with 1002 (1009: too large)."""

    code: Literal[
        "invalid_json",
        "invalid_message",
        "unknown_message_type",
        "registration_required",
        "already_registered",
        "frame_too_large",
        "heartbeat_timeout",
    ]
    message: Text


ServerFrame = (
    RegisterAck
    | RegisterError
    | Task
    | Cancel
    | ResultAck
    | ResultRejected
    | Shutdown
    | ProtocolError
)

WORKER_TYPES = frozenset(("register", "heartbeat", "taskResult", "drain"))
SERVER_TYPES = frozenset(
    (
        "registerAck",
        "registerError",
        "task",
        "cancel",
        "resultAck",
        "resultRejected",
        "shutdown",
        "protocolError",
    )
)

_worker_decoder = msgspec.json.Decoder(WorkerFrame)
_server_decoder = msgspec.json.Decoder(ServerFrame)
_encoder = msgspec.json.Encoder()


class _Envelope(msgspec.Struct):
    type: str


_envelope = msgspec.json.Decoder(_Envelope)


class FrameError(Exception):
    """A frame that does not fit the protocol: ``code`` is the ``protocolError`` code."""

    def __init__(self, code: str, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.kind = kind  # the frame's ``type``, when it had a readable one


def _decode(text: str | bytes, decoder: Any, known: frozenset[str], side: str) -> Any:
    try:
        return decoder.decode(text)
    except msgspec.ValidationError as exc:
        try:
            kind = _envelope.decode(text).type
        except msgspec.DecodeError:
            kind = None
        if kind is not None and kind not in known:
            raise FrameError(
                "unknown_message_type", f"{kind!r} is not a {side} frame type"
            ) from None
        raise FrameError("invalid_message", f"invalid {kind or 'frame'}: {exc}", kind) from None
    except msgspec.DecodeError as exc:
        raise FrameError("invalid_json", f"the frame is not JSON: {exc}") from None


def decode_worker_frame(text: str | bytes) -> Register | Heartbeat | TaskResult | Drain:
    """A frame from a worker, or :class:`FrameError`."""
    frame: Register | Heartbeat | TaskResult | Drain = _decode(
        text, _worker_decoder, WORKER_TYPES, "worker"
    )
    return frame


def decode_server_frame(text: str | bytes) -> Any:
    """A frame from the server (what a worker reads), or :class:`FrameError`."""
    return _decode(text, _server_decoder, SERVER_TYPES, "server")


def encode(frame: msgspec.Struct) -> str:
    return _encoder.encode(frame).decode()


def protocol_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of both directions, derived from the structs above."""
    (worker, server), defs = msgspec.json.schema_components(
        [WorkerFrame, ServerFrame], ref_template="#/$defs/{name}"
    )
    defs["WorkerFrame"] = worker
    defs["ServerFrame"] = server
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "pyweft remote worker protocol",
        "description": (
            "JSON text frames on the WebSocket /api/v1/tasks/{queue}/stream. A worker "
            "sends WorkerFrame objects and receives ServerFrame objects."
        ),
        "x-protocol-version": PROTOCOL_VERSION,
        "oneOf": [{"$ref": "#/$defs/WorkerFrame"}, {"$ref": "#/$defs/ServerFrame"}],
        "$defs": dict(sorted(defs.items())),
    }


def render_schema() -> str:
    return json.dumps(protocol_schema(), indent=2, sort_keys=False) + "\n"
