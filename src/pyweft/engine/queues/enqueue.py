"""Writing a run onto a workflow queue.

The run's state (status ``enqueued``), its index entries, its waiting entry, its
partition marker and its deduplication id are written in ONE conditional batch: an
enqueue either fully happened or did not happen at all, and a crash never leaves a
run that is stored but on no queue (or on a queue but not stored).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from pyweft.codec import encode_args, payload_size_error
from pyweft.durations import parse_optional_duration
from pyweft.engine.control.core import EngineCore, create_ops
from pyweft.engine.control.creation import check_id
from pyweft.engine.queues import layout
from pyweft.engine.queues.queue import Queue, check_partition, check_priority
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.records import TERMINAL_STATUSES, WorkflowState
from pyweft.errors import InvalidArgumentError, QueueDeduplicatedError, WorkflowAlreadyExistsError
from pyweft.storage.base import Expect, Op, Put

QUEUE_TOPIC = "wfq"
"""Notification topic: something was enqueued, or a slot was freed (see dispatch)."""

_ATTEMPTS = 5


async def enqueue(
    core: EngineCore,
    queue: Queue,
    wf: Callable[..., Any] | str,
    args: tuple[Any, ...],
    *,
    id: str | None,
    priority: int | None,
    deduplication_id: str | None,
    delay: Any,
    partition_key: str | None,
    order: Callable[[float], float] = lambda now: now,
) -> WorkflowState:
    """Check everything, then store the run as ``enqueued``. Returns its state.

    ``order`` turns the clock's time into the entry's place in line (see QueuesAPI)."""
    core.services_or_raise()
    definition = core.definition(wf)
    workflow_id = check_id(id, "id") if id is not None else str(uuid.uuid4())
    rank = check_priority(queue, priority)
    partition = check_partition(queue, partition_key)
    if deduplication_id is not None:
        if not isinstance(deduplication_id, str) or not deduplication_id:
            raise InvalidArgumentError(
                f"deduplication_id must be a non-empty string, got {deduplication_id!r}"
            )
        check_id(deduplication_id, "deduplication_id")
    wait_s = parse_optional_duration(delay, field="delay")
    definition.check_arguments(args)
    payload = encode_args(core.codec, args)
    if len(payload) > core.max_payload_bytes:
        raise payload_size_error(
            len(payload), core.max_payload_bytes, what=f"arguments of {definition.name!r}"
        )
    now = core.clock.now()
    not_before = now + wait_s if wait_s else None
    # First in, first out within a priority: the waiting entry's time never repeats
    # in this engine (``order``), even when the clock does not move (a virtual clock).
    wait_key = layout.waiting(queue.name, partition, rank, order(now), workflow_id)
    state = WorkflowState(
        id=workflow_id,
        type=definition.name,
        version=definition.version,
        status="enqueued",
        args=payload,
        created_at=now,
        updated_at=now,
        start_at=not_before,
        queue=queue.name,
        queue_wait_key=wait_key,
    )
    raw = records.encode(state)
    ops, conditions = create_ops(state, raw)
    ops.append(Put(key=wait_key, value=b"" if not_before is None else repr(not_before).encode()))
    if queue.partitioned:
        ops.append(Put(key=layout.marker(queue.name, partition), value=uuid.uuid4().bytes))
    holder: bytes | None = None  # the dedup key's value we expect
    for _ in range(_ATTEMPTS):
        batch_ops: list[Op] = list(ops)
        batch_conds: list[Expect] = list(conditions)
        if deduplication_id is not None:
            dedup_key = layout.dedup(queue.name, deduplication_id)
            batch_ops.append(Put(key=dedup_key, value=workflow_id.encode()))
            batch_conds.append(Expect(key=dedup_key, value=holder))
        if await core.committer.commit(batch_ops, batch_conds):
            return state
        if await core.storage.get(keys.wf(workflow_id)) is not None:
            raise WorkflowAlreadyExistsError(
                f"a run with id {workflow_id!r} already exists; enqueue a new run under "
                "another id (or none: a random one is chosen)",
                workflow_id=workflow_id,
            )
        if deduplication_id is None:
            continue
        holder = await _free_holder(core, queue, deduplication_id)
    raise RuntimeError(f"enqueue of {workflow_id!r} kept losing races; try again")


async def _free_holder(core: EngineCore, queue: Queue, deduplication_id: str) -> bytes | None:
    """The dedup key's current value when the run holding it has finished (so the id
    is free again); raises :class:`QueueDeduplicatedError` while that run is queued or
    running."""
    raw = await core.storage.get(layout.dedup(queue.name, deduplication_id))
    if raw is None:
        return None
    holder_id = raw.decode()
    state_raw = await core.storage.get(keys.wf(holder_id))
    if state_raw is not None:
        status = records.decode_state(state_raw, key=keys.wf(holder_id)).status
        if status not in TERMINAL_STATUSES:
            raise QueueDeduplicatedError(
                f"queue {queue.name!r} already has run {holder_id!r} ({status}) with "
                f"deduplication id {deduplication_id!r}; a second one is refused until that "
                "run finishes",
                queue=queue.name,
                deduplication_id=deduplication_id,
                workflow_id=holder_id,
            )
    return raw
