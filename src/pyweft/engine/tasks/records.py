"""Task records: an activity attempt handed to worker processes, and where it is stored.

An activity whose queue the driving engine does not serve becomes a task. Its
life in the store, every transition one conditional batch:

- **queued**: ``tk:t:{id}`` (the record) and ``tk:q:{queue}:{time}:{id}`` (the
  ready index, oldest first), written with the step's progress record;
- **claimed**: the index entry is gone, the record names the worker and the
  time its claim ends, and ``tk:l:{until}:{id}`` lets anyone find it once the
  claim has expired; the worker's heartbeats push the time on;
- **done**: the record and its lease entry are deleted and ``tk:r:{id}`` holds
  the outcome, all conditioned on the exact record the worker claimed, so a
  displaced worker's late result is refused; the engine records the step and
  deletes the outcome in the same batch.

A task id is ``{run}:{generation}:{step}:{attempt}``: one per attempt, so an
expired claim fails that attempt and the step's retry policy decides about the
next one, written as a new task. ``tk:w:{worker}`` is a worker's liveness
record and ``tk:d:{worker}`` asks it to drain.
"""

from __future__ import annotations

import re

import msgspec

from pyweft.engine.replay import keys
from pyweft.engine.replay.records import ErrorInfo, corrupt
from pyweft.errors import InvalidArgumentError

DEFAULT_QUEUE = "default"
DEFAULT_VISIBILITY_S = 30.0
REF_PREFIX = "task:"  # a step's progress record points at its task with this ``ref``
TASKS_TOPIC = "pyweft_tasks"  # a task was written: workers look
RESULTS_TOPIC = "pyweft_task_results"  # an outcome was written: engines look


def results_rings(freed_slot: bool) -> tuple[str, ...]:
    """What storing outcomes rings: the engines waiting for them, and the workers of a
    limited queue when an outcome freed one of its slots."""
    return (RESULTS_TOPIC, TASKS_TOPIC) if freed_slot else (RESULTS_TOPIC,)


_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}").fullmatch


def check_queue(name: object, *, field: str = "queue") -> str:
    """A queue name, or :class:`InvalidArgumentError` saying what one looks like."""
    if not isinstance(name, str) or _QUEUE_NAME(name) is None:
        raise InvalidArgumentError(
            f"{field} must be a queue name of 1 to 64 letters, digits, '_' or '-', got {name!r}"
        )
    return name


class Task(msgspec.Struct, array_like=True, frozen=True):
    """One attempt of an activity, waiting for (or held by) a worker."""

    id: str
    queue: str
    workflow_id: str
    workflow_type: str
    activity: str
    step: int
    attempt: int
    generation: int
    execution_token: str
    args: bytes  # the codec's encoding of the argument tuple
    created_at: float
    scheduled_at: float  # when the step's first attempt started
    ready_key: str
    visibility_s: float
    timeout_s: float | None = None
    heartbeat_timeout_s: float | None = None
    claimed_by: str | None = None
    claimed_at: float = 0.0
    claim_until: float = 0.0
    refused_by: tuple[str, ...] = ()  # workers that do not have the activity
    last_error: str | None = None
    slot: str | None = None  # the queue's concurrency slot it holds (see limits.py)
    # The run's headers (context propagation, e.g. a trace context): the worker makes them
    # current for the attempt. Appended last: records written before it decode as None.
    headers: dict[str, str] | None = None


class TaskResult(msgspec.Struct, array_like=True, frozen=True):
    """The outcome of one task, kept until the engine records the step with it."""

    task_id: str
    ok: bool
    at: float
    worker: str
    value: bytes | None = None
    error: ErrorInfo | None = None
    non_retryable: bool = False
    timeout_kind: str | None = None  # set when the attempt ran out of time


class WorkerRecord(msgspec.Struct, array_like=True, frozen=True):
    """A worker's liveness record, rewritten on every heartbeat."""

    id: str
    queues: tuple[str, ...]
    activities: tuple[str, ...]
    concurrency: int
    in_flight: int
    started_at: float
    heartbeat_at: float
    expires_at: float  # past this without a heartbeat, the worker counts as gone
    host: str
    pid: int
    draining: bool = False
    completed: int = 0
    failed: int = 0


_task_dec = msgspec.msgpack.Decoder(Task)
_result_dec = msgspec.msgpack.Decoder(TaskResult)
_worker_dec = msgspec.msgpack.Decoder(WorkerRecord)
_enc = msgspec.msgpack.Encoder()


def encode(record: Task | TaskResult | WorkerRecord) -> bytes:
    return _enc.encode(record)


def decode_task(raw: bytes, *, key: str | None = None) -> Task:
    try:
        return _task_dec.decode(raw)
    except (ValueError, TypeError, OverflowError) as exc:
        raise corrupt(key, "activity task", exc) from exc


def decode_result(raw: bytes, *, key: str | None = None) -> TaskResult:
    try:
        return _result_dec.decode(raw)
    except (ValueError, TypeError, OverflowError) as exc:
        raise corrupt(key, "activity task result", exc) from exc


def decode_worker(raw: bytes, *, key: str | None = None) -> WorkerRecord:
    try:
        return _worker_dec.decode(raw)
    except (ValueError, TypeError, OverflowError) as exc:
        raise corrupt(key, "worker", exc) from exc


# --- keys -------------------------------------------------------------------------------

TASK_PREFIX = "tk:t:"
READY_PREFIX = "tk:q:"
LEASE_PREFIX = "tk:l:"
RESULT_PREFIX = "tk:r:"
WORKER_PREFIX = "tk:w:"
DRAIN_PREFIX = "tk:d:"


def task_id(workflow_id: str, generation: int, step: int, attempt: int) -> str:
    return f"{keys.enc(workflow_id)}:{generation}:{step}:{attempt}"


def task_key(tid: str) -> str:
    return TASK_PREFIX + tid


def ready_prefix(queue: str) -> str:
    return f"{READY_PREFIX}{queue}:"


def ready_key(queue: str, at: float, tid: str) -> str:
    return f"{READY_PREFIX}{queue}:{keys.ts16(at)}:{tid}"


def id_of_ready(key: str) -> str:
    return key.split(":", 4)[4]


def lease_key(until: float, tid: str) -> str:
    return f"{LEASE_PREFIX}{keys.ts16(until)}:{tid}"


def lease_bound(now: float) -> str:
    """The end of the lease index's expired part at ``now`` (exclusive)."""
    return f"{LEASE_PREFIX}{keys.ts16(now)};"


def id_of_lease(key: str) -> str:
    return key.split(":", 3)[3]


def result_key(tid: str) -> str:
    return RESULT_PREFIX + tid


def worker_key(worker_id: str) -> str:
    return WORKER_PREFIX + keys.enc(worker_id)


def drain_key(worker_id: str) -> str:
    return DRAIN_PREFIX + keys.enc(worker_id)
