"""Creating runs: ``start``, ``start_or_signal`` and idempotent starts.

A run's state, its index entries, its search attributes, its idempotency mapping
and (for ``start_or_signal``) its first signal are written in ONE conditional batch,
so a start either fully happened or did not happen at all.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pyweft.codec import encode_args, payload_size_error
from pyweft.durations import parse_optional_duration, parse_timestamp
from pyweft.engine.control.core import EngineCore, create_ops
from pyweft.engine.messages.signals import SignalSender
from pyweft.engine.ownership.claims import ClaimPlan
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.records import WorkflowState
from pyweft.engine.replay.run import Run
from pyweft.engine.steps import attributes as search_attributes
from pyweft.errors import (
    IdempotencyKeySpentError,
    InvalidArgumentError,
    WorkflowAlreadyExistsError,
)
from pyweft.storage.base import Expect, Op, Put

MAX_ID_BYTES = keys.MAX_ID_BYTES


MAX_TAG_CHARS = 100


def check_id(value: object, what: str) -> str:
    """A workflow id (or idempotency key) fit to store and to print; see ``keys.check_text``."""
    return keys.check_text(value, what, MAX_ID_BYTES)


def start_time(now: float, start_delay: Any, start_at: datetime | float | None) -> float | None:
    if start_delay is not None and start_at is not None:
        raise InvalidArgumentError("pass start_delay= or start_at=, not both")
    if start_delay is not None:
        delay = parse_optional_duration(start_delay, field="start_delay")
        return None if delay is None else now + delay
    if start_at is None:
        return None
    return parse_timestamp(start_at, field="start_at", error=InvalidArgumentError)


async def create(
    core: EngineCore,
    signals: SignalSender,
    wf: Callable[..., Any] | str,
    args: tuple[Any, ...],
    *,
    id: str | None,
    idempotency_key: str | None = None,
    on_conflict: str = "fail",
    execution_timeout: Any = None,
    start_delay: Any = None,
    start_at: datetime | float | None = None,
    tags: Sequence[str] = (),
    attributes: Mapping[str, Any] | None = None,
    first_signal: tuple[str, object, str | None] | None = None,
    encoded_args: bytes | None = None,
    schedule: tuple[str, float] | None = None,
    extra: tuple[list[Op], list[Expect]] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[str, bool]:
    """Build and commit a run's create batch. Returns ``(workflow id, created)``.

    For schedules: ``encoded_args`` are arguments already checked and encoded when
    the schedule was stored, ``schedule`` is ``(schedule id, nominal time)`` kept
    as the run's provenance, and ``extra`` writes and conditions (the schedule's
    own state) join the create batch, so a run and its schedule's advance land
    together or not at all (``created`` is False when any condition failed).
    """
    services = core.services_or_raise()
    definition = core.definition(wf)
    if on_conflict not in ("fail", "use_existing"):
        raise InvalidArgumentError(
            f"on_conflict must be 'fail' or 'use_existing', got {on_conflict!r}"
        )
    if id is not None and idempotency_key is not None:
        raise InvalidArgumentError(
            "pass either id= or idempotency_key=, not both: an idempotency key chooses the run"
        )
    workflow_id = check_id(id, "id") if id is not None else str(uuid.uuid4())
    if idempotency_key is not None:
        check_id(idempotency_key, "idempotency_key")
    if isinstance(tags, str):
        raise InvalidArgumentError(f"tags must be a list of strings, got the string {tags!r}")
    tag_list = sorted(set(tags))
    for tag in tag_list:
        keys.check_text(tag, "tag", 4 * MAX_TAG_CHARS)
        if len(tag) > MAX_TAG_CHARS:
            raise InvalidArgumentError(
                f"tag {tag[:20]!r}... has {len(tag)} characters; the limit is {MAX_TAG_CHARS}"
            )
    attrs = search_attributes.normalize(attributes) if attributes is not None else {}
    attrs = {name: value for name, value in attrs.items() if value is not None}
    if encoded_args is None:
        definition.check_arguments(args)
        payload = encode_args(core.codec, args)
    else:
        payload = encoded_args
    if len(payload) > core.max_payload_bytes:
        raise payload_size_error(
            len(payload), core.max_payload_bytes, what=f"arguments of {definition.name!r}"
        )
    now = core.clock.now()
    timeout_s = parse_optional_duration(execution_timeout, field="execution_timeout")
    begin = start_time(now, start_delay, start_at)
    status = "pending" if begin is not None and begin > now else "running"
    state = WorkflowState(
        id=workflow_id,
        type=definition.name,
        version=definition.version,
        status=status,
        args=payload,
        created_at=now,
        updated_at=now,
        idempotency_key=idempotency_key,
        start_at=begin if status == "pending" else None,
        deadline=None if timeout_s is None else max(now, begin or now) + timeout_s,
        tags=tag_list,
        schedule_id=None if schedule is None else schedule[0],
        nominal_time=None if schedule is None else schedule[1],
        headers=headers or {},
    )
    raw = records.encode(state)
    ops, conditions = create_ops(state, raw)
    if attrs:  # indexed from the start, in the create batch: never a run without them
        ops += search_attributes.changes(workflow_id, now, {}, attrs)
    if extra is not None:
        ops += extra[0]
        conditions += extra[1]
    if idempotency_key is not None:
        idem = keys.idempotency(idempotency_key)
        ops.append(Put(key=idem, value=workflow_id.encode()))
        conditions.append(Expect(key=idem, value=None))
    if first_signal is not None:
        name, signal_payload, signal_id = first_signal
        data = signals.encode(signal_payload)
        signal_ops, signal_conds = signals.start_ops(workflow_id, name, data, signal_id, now)
        ops += signal_ops
        conditions += signal_conds
    if not core.drives:
        # A client drives nothing: the wake-up tells the engine that holds the store
        # (its wake-up scan adopts the run, or arms its start timer) in the same batch.
        ops.append(Put(key=keys.wake(workflow_id), value=keys.wake_value()))
    # A running run is claimed in its create batch (a pending one when it starts).
    # Optimistically first: a new id has no claim keys, so no read is needed; a
    # purged run's id keeps its epoch, and that is read when the guess fails.
    claims = core.claims if status == "running" else None
    plan = claims.fresh_ops(workflow_id) if claims is not None else None
    created = await core.committer.commit(*_with_claim(ops, conditions, plan))
    if not created and claims is not None:
        plan = await claims.acquire_ops(workflow_id)
        created = await core.committer.commit(*_with_claim(ops, conditions, plan))
    if not created:
        if first_signal is not None:
            await _check_same_type(core, workflow_id, definition.name, "start_or_signal")
            return workflow_id, False
        existing = await _conflict(core, workflow_id, idempotency_key, on_conflict)
        await _check_same_type(core, existing, definition.name, "start")
        return existing, False
    if plan is not None and claims is not None:
        claims.adopt(plan[2])
    core.emit("started", state)
    if status == "pending":
        if core.drives:
            core.arm_pending(state)
    else:
        core.launch(Run(services, definition, state, raw, {}, {}, attributes=attrs))
    return workflow_id, True


def _with_claim(
    ops: list[Op], conditions: list[Expect], plan: ClaimPlan | None
) -> tuple[list[Op], list[Expect]]:
    return (ops, conditions) if plan is None else (ops + plan[0], conditions + plan[1])


async def _check_same_type(
    core: EngineCore, workflow_id: str, workflow_type: str, call: str
) -> None:
    """Refuse to hand back (or signal) an existing run of another workflow type.

    Returning it would give the caller a handle whose result is not what the
    workflow they named returns, with nothing to say so.
    """
    raw = await core.storage.get(keys.wf(workflow_id))
    if raw is None:
        return  # purged in between: nothing to mistake for the named workflow
    existing = records.decode_state(raw)
    if existing.type != workflow_type:
        raise WorkflowAlreadyExistsError(
            f"{call} of workflow {workflow_type!r} found run {workflow_id!r} already there, but "
            f"that run is of workflow {existing.type!r}, so it is not used; pick another id (or "
            "idempotency key), or name the workflow that run belongs to",
            workflow_id=workflow_id,
        )


async def _conflict(
    core: EngineCore, workflow_id: str, idempotency_key: str | None, on_conflict: str
) -> str:
    if idempotency_key is not None:
        existing = await core.storage.get(keys.idempotency(idempotency_key))
        if existing is not None:
            mapped = existing.decode()
            if await core.storage.get(keys.wf(mapped)) is None:
                raise IdempotencyKeySpentError(
                    f"idempotency key {idempotency_key!r} already started run {mapped!r}, which "
                    "has since been purged; the key is spent and will not start another run",
                    idempotency_key=idempotency_key,
                    workflow_id=mapped,
                )
            return mapped
        raise WorkflowAlreadyExistsError(
            f"a run with the generated id {workflow_id!r} already exists; retry the start",
            workflow_id=workflow_id,
        )
    if on_conflict == "use_existing":
        return workflow_id
    raise WorkflowAlreadyExistsError(
        f"a workflow run with id {workflow_id!r} already exists; choose another id or pass "
        "on_conflict='use_existing' to get its handle",
        workflow_id=workflow_id,
    )
