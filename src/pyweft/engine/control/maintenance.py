"""Changing runs after the fact: attributes from outside and fork.

Purge and retention live in ``purge`` and ``retention``; they are re-exported here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping

import msgspec

from pyweft.engine.control.core import EngineCore, create_ops
from pyweft.engine.control.purge import purge, purge_run
from pyweft.engine.control.retention import RetentionSweeper
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.records import AppliedUpdate, StepRecord, WorkflowState
from pyweft.engine.replay.recovery import load_run
from pyweft.engine.replay.run import Run
from pyweft.engine.steps import attributes
from pyweft.engine.visibility.reader import not_found
from pyweft.errors import (
    InvalidArgumentError,
    WorkflowAlreadyExistsError,
    WorkflowNotRegisteredError,
)
from pyweft.storage.base import Expect, Put

log = logging.getLogger("pyweft.maintenance")


async def set_attributes(core: EngineCore, workflow_id: str, values: Mapping[str, object]) -> None:
    update = attributes.normalize(values)
    core.services_or_raise()
    await core.settled(workflow_id)
    run = core.runs.get(workflow_id)
    if run is not None:
        new = attributes.merged(run.attributes, update)
        for op in attributes.changes(run.id, run.state.created_at, run.attributes, new):
            run.staged[op.key] = op
        run.attributes = new
        await run.flush_staged()
        return
    attrs_key = keys.attributes(workflow_id)
    while True:
        state_raw = await core.storage.get(keys.wf(workflow_id))
        if state_raw is None:
            raise not_found(workflow_id)
        state = records.decode_state(state_raw, key=keys.wf(workflow_id))
        attrs_raw = await core.storage.get(attrs_key)
        old = records.decode_attributes(attrs_raw, key=attrs_key) if attrs_raw else {}
        ops = attributes.changes(workflow_id, state.created_at, old, attributes.merged(old, update))
        # The engine driving the run (elsewhere) must reload them before it sets its own.
        ops.append(Put(key=keys.wake(workflow_id), value=keys.wake_value()))
        conds = [
            Expect(key=attrs_key, value=attrs_raw),
            Expect(key=keys.wf(workflow_id), value=state_raw),
        ]
        if await core.committer.commit(ops, conds):
            return


async def fork(
    core: EngineCore,
    source_id: str,
    from_step: int | None,
    new_id: str | None,
    *,
    drive: bool = True,
) -> str:
    """Start a new run that reuses ``source_id``'s journal up to ``from_step``.

    With ``drive=False`` the run is only stored (with a wake-up), for whichever
    engine registers its type to pick up; tools such as the CLI use that.
    """
    from pyweft.engine.control.creation import check_id

    services = core.services_or_raise()
    if new_id is not None:
        check_id(new_id, "id")
    if from_step is not None and (type(from_step) is not int or from_step < 0):
        raise InvalidArgumentError(f"from_step must be an int >= 0, got {from_step!r}")
    loaded = await load_run(core.storage, source_id)
    if loaded is None:
        raise not_found(source_id)
    source = loaded.state
    definition = core.workflows.get(source.type)
    if definition is None and drive:
        raise WorkflowNotRegisteredError(
            f"cannot fork {source_id!r}: workflow {source.type!r} is not registered here",
            workflow_type=source.type,
        )
    # The workflow's own steps: async update handlers number theirs far past them.
    last = max((s for s in loaded.journal if s < keys.HANDLER_STEP_BASE), default=0)
    if from_step is not None and from_step > last:
        raise InvalidArgumentError(
            f"cannot fork {source_id!r} from step {from_step}: its last committed step is "
            f"{last}; pass a from_step between 0 and {last}, or none to take every step"
        )
    upto = last if from_step is None else from_step
    workflow_id = new_id or str(uuid.uuid4())
    now = core.clock.now()
    state = WorkflowState(
        id=workflow_id,
        type=source.type,
        version=definition.version if definition is not None else source.version,
        status="running",
        args=source.args,
        created_at=now,
        updated_at=now,
        tags=list(source.tags),
        forked_from=source_id,
        forked_at_step=upto,
    )
    raw = records.encode(state)
    ops, conds = create_ops(state, raw)
    kept = [u for u in loaded.applied if u.boundary <= upto]
    # Async handler invocations are numbered in log order: the fork keeps the journals of
    # those whose application it keeps (whole, as they were when the source was read).
    invocations = sum(1 for u in kept if u.kind == "async_update")
    journal, applied, fork_updates = _own_update_ids(
        core,
        {s: r for s, r in loaded.journal.items() if _kept_step(s, upto, invocations)},
        kept,
    )
    for step, rec in journal.items():
        ops.append(Put(key=keys.journal(workflow_id, step), value=records.encode(rec)))
    for update_id in fork_updates:  # so update_result finds them and purge removes them
        ops.append(Put(key=keys.update_owner(update_id), value=workflow_id.encode()))
        ops.append(Put(key=keys.run_update(workflow_id, update_id), value=b""))
    for u in applied:
        ops.append(
            Put(key=keys.applied_update(workflow_id, u.boundary, u.index), value=records.encode(u))
        )
    for change, version in loaded.version_pins.items():
        ops.append(Put(key=keys.version_pin(workflow_id, change), value=str(version).encode()))
    if loaded.attributes:
        ops += attributes.changes(workflow_id, now, {}, loaded.attributes)
    plan = None
    if drive and core.claims is not None:
        plan = await core.claims.acquire_ops(workflow_id)
    if plan is not None:
        ops += plan[0]
        conds += plan[1]
    if not drive:
        ops.append(Put(key=keys.wake(workflow_id), value=keys.wake_value()))
    if not await core.committer.commit(ops, conds):
        raise WorkflowAlreadyExistsError(
            f"cannot fork into {workflow_id!r}: a run with that id already exists",
            workflow_id=workflow_id,
        )
    if plan is not None and core.claims is not None:
        core.claims.adopt(plan[2])
    core.emit("started", state, forked_from=source_id, from_step=upto)
    if not drive or definition is None:
        return workflow_id
    core.launch(
        Run(
            services,
            definition,
            state,
            raw,
            dict(journal),
            {},
            applied,
            dict(loaded.version_pins),
            dict(loaded.attributes),
        )
    )
    return workflow_id


def _kept_step(step: int, upto: int, invocations: int) -> bool:
    invocation = keys.handler_invocation(step)
    return step <= upto if invocation is None else invocation < invocations


def _own_update_ids(
    core: EngineCore, journal: dict[int, StepRecord], applied: list[AppliedUpdate]
) -> tuple[dict[int, StepRecord], list[AppliedUpdate], list[str]]:
    """The copied journal and update log with every update id replaced by a fresh one.

    A fork replays ``ctx.wait_for_update`` steps and may answer them again
    (``request.respond``); under the source's update ids that answer would overwrite
    the one the source's caller already received. Under ids of its own the fork's
    answers are the fork's. Returns the new ids of the update steps (the ones a fork
    may answer).
    """
    codec = core.codec
    fresh: dict[str, str] = {}

    def renamed(update_id: str) -> str:
        return fresh.setdefault(update_id, uuid.uuid4().hex)

    answerable: list[str] = []
    out: dict[int, StepRecord] = {}
    for step, rec in journal.items():
        if rec.kind == "update" and rec.ok and rec.value is not None:
            update_id, payload = codec.decode(rec.value, tuple[str, bytes | None])
            new_id = renamed(update_id)
            answerable.append(new_id)
            rec = msgspec.structs.replace(rec, value=codec.encode((new_id, payload)))
        out[step] = rec
    log_ = [msgspec.structs.replace(u, update_id=renamed(u.update_id)) for u in applied]
    return out, log_, answerable


__all__ = ["RetentionSweeper", "fork", "purge", "purge_run", "set_attributes"]
