"""Child workflows: independent runs started (and optionally awaited) by a parent.

The child's create batch and the parent's open-step record commit together,
so a child is started exactly once. With ``parent_close_policy="await"`` the
parent's step records the child's result or failure; ``"abandon"`` and
``"request_cancel"`` record the child id at once. When the parent ends,
children with ``"await"`` or ``"request_cancel"`` that are still running are
asked to cancel in the parent's own terminal commit (see :class:`ClosePlan`).
A start that finds its id taken is recorded as the step's outcome, so replay
raises the same ``WorkflowAlreadyExistsError`` and creates nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import msgspec

from pyweft.engine.replay import keys, records
from pyweft.engine.replay.driving import status_change_ops
from pyweft.engine.replay.operations import operation
from pyweft.engine.replay.records import TERMINAL_STATUSES, ErrorInfo, PendingStep, StepRecord
from pyweft.engine.replay.run import Run, Superseded
from pyweft.errors import (
    ChildWorkflowError,
    CorruptRecordError,
    NestingLimitError,
    WorkflowAlreadyExistsError,
)
from pyweft.storage.base import Delete, Expect, Op, Put, Storage

MAX_DEPTH = 10
POLICIES = ("await", "abandon", "request_cancel")


@operation
async def child_step(
    run: Run,
    step: int,
    wf: Callable[..., Any] | str,
    args: tuple[Any, ...],
    child_id: str | None,
    policy: str,
    timeout_s: float | None = None,
) -> Any:
    host = run.services.children
    assert host is not None
    definition = host.child_definition(wf)
    codec = run.services.codec
    run.has_children = True
    rec = run.replay(step, "child", definition.name, args)
    if rec is not None:
        return _outcome(run, rec, definition.result_type, policy)
    try:
        await run.enter_live()
    except asyncio.CancelledError:
        started = run.pendings.get(step)
        if policy == "await" and started is not None and started.ref and not run.stopping:
            # Cancelled before its wait resumed (e.g. a cancel stored while no engine
            # drove the parent): the child it would have awaited goes too.
            await asyncio.shield(host.cancel_child(started.ref))
        raise
    clock = run.services.clock
    pend = run.take_pending(step, "child", definition.name, args)
    if pend is None:
        if run.state.depth + 1 > MAX_DEPTH:
            raise NestingLimitError(
                f"workflow {run.id!r} cannot start a child: children may nest at most "
                f"{MAX_DEPTH} levels deep",
                workflow_id=run.id,
            )
        cid = child_id or default_child_id(run, step)
        deadline = child_deadline(run, policy, clock.now(), timeout_s)
        ops, conds, launch = await host.child_create(
            run, definition, args, cid, policy, deadline=deadline
        )
        pend = PendingStep(
            step=step,
            kind="child",
            name=definition.name,
            deadline=0.0,
            first_started_at=clock.now(),
            ref=cid,
        )
        # Shielded: if a race cancels this branch mid-write, the child may still be
        # created; then it is cancelled instead of left running undriven.
        creating = asyncio.ensure_future(run.commit_pending(pend, ops, conds))
        try:
            created = await asyncio.shield(creating)
        except asyncio.CancelledError:
            if not run.stopping:
                await asyncio.shield(_cancel_if_created(host, creating, cid))
            raise
        if not created:
            await _record_collision(run, step, definition.name, cid)
        launch()
    cid = pend.ref or ""
    if policy != "await":
        await run.commit_step(
            StepRecord(
                step=step,
                kind="child",
                name=definition.name,
                ok=True,
                started_at=pend.first_started_at,
                finished_at=clock.now(),
                value=codec.encode(cid),
            )
        )
        return cid
    run.child_waits += 1
    try:
        state = await run.live(host.wait_terminal(cid))
    except asyncio.CancelledError:
        if not run.stopping:  # lost a race, or the parent was cancelled: the child goes too
            await asyncio.shield(host.cancel_child(cid))
        raise
    finally:
        run.child_waits -= 1
    if state.status == "completed":
        done = StepRecord(
            step=step,
            kind="child",
            name=definition.name,
            ok=True,
            started_at=pend.first_started_at,
            finished_at=clock.now(),
            value=state.result,
        )
    else:
        err = state.error
        done = StepRecord(
            step=step,
            kind="child",
            name=definition.name,
            ok=False,
            started_at=pend.first_started_at,
            finished_at=clock.now(),
            error=ErrorInfo(
                type=err.type if err else state.status,
                message=f"{cid}\x00{state.status}\x00{err.message if err else ''}",
                code="ChildWorkflowError",
            ),
        )
    await run.commit_step(done)
    return _outcome(run, done, definition.result_type, policy)


async def _cancel_if_created(host: Any, creating: asyncio.Future[bool], child_id: str) -> None:
    try:
        created = await creating
    except BaseException:
        return
    if created:
        await host.cancel_child(child_id)


def child_deadline(run: Run, policy: str, now: float, timeout_s: float | None) -> float | None:
    """When the child times out: its own ``execution_timeout``, bounded by the parent's
    deadline unless it is abandoned (an abandoned child is meant to outlive its parent)."""
    own = None if timeout_s is None else now + timeout_s
    parent = run.state.deadline if policy != "abandon" else None
    if own is None or parent is None:
        return own if parent is None else parent
    return min(own, parent)


def default_child_id(run: Run, step: int) -> str:
    """``{parent id}/{step}`` in generation 0 (the form runs already stored use), and
    ``{parent id}/g{generation}/{step}`` after ``continue_as_new``, whose steps count
    from 1 again."""
    generation = run.state.generation
    return f"{run.id}/{step}" if generation == 0 else f"{run.id}/g{generation}/{step}"


async def _record_collision(run: Run, step: int, name: str, child_id: str) -> NoReturn:
    """Journal a start that found its id taken, then raise it: replay raises the same
    error at this step and creates nothing, even once that id is free again."""
    if await run.services.storage.get(keys.wf(child_id)) is None:
        # Another condition of the create batch failed (a claim changed hands): nothing
        # is decided yet, so the run is replayed rather than told a collision.
        raise Superseded()
    now = run.services.clock.now()
    error = _collision(child_id)
    await run.commit_step(
        StepRecord(
            step=step,
            kind="child",
            name=name,
            ok=False,
            started_at=now,
            finished_at=now,
            error=ErrorInfo(type=error.code, message=child_id, code=error.code),
        )
    )
    raise error


def _collision(child_id: str) -> WorkflowAlreadyExistsError:
    return WorkflowAlreadyExistsError(
        f"cannot start child {child_id!r}: a run with that id already exists; give the "
        "child another id, or catch WorkflowAlreadyExistsError",
        workflow_id=child_id,
    )


def _outcome(run: Run, rec: StepRecord, result_type: object, policy: str) -> Any:
    codec = run.services.codec
    if not rec.ok and rec.error is not None and rec.error.code == "WorkflowAlreadyExistsError":
        raise _collision(rec.error.message)
    if rec.ok:
        if policy != "await":
            return codec.decode(rec.value or b"\xa0")
        return None if rec.value is None else codec.decode(rec.value, result_type)
    err = rec.error or ErrorInfo(type="Exception", message="\x00failed\x00")
    child_id, status, message = [*err.message.split("\x00"), "", "", ""][:3]
    raise ChildWorkflowError(
        f"child workflow {child_id!r} {status}: {err.type}: {message}",
        child_id=child_id,
        status=status,
        error_type=err.type,
        error_message=message,
    )


@dataclass(slots=True)
class ClosePlan:
    """The writes that carry out a parent's close policies, for its terminal batch.

    Riding in the same commit as the parent's end, they cannot be lost to a crash
    between the two: a running child gets ``cancel_requested`` and a wake-up marker
    (whichever engine drives it, or recovers it later, delivers the cancel); a pending
    or suspended child, which nobody drives, is cancelled at once, and its own
    children with it. ``conditions`` hold each child's bytes as read.
    """

    ops: list[Op] = field(default_factory=list)
    conditions: list[Expect] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)  # running children asked to cancel


async def close_plan(storage: Storage, parent_id: str, now: float) -> ClosePlan:
    plan = ClosePlan()
    await _add_children(storage, parent_id, now, plan, depth=0)
    return plan


async def _add_children(
    storage: Storage, parent_id: str, now: float, plan: ClosePlan, depth: int
) -> None:
    for index_key, _ in await storage.scan(f"ix:p:{keys.enc(parent_id)}:"):
        child_id = keys.id_from_index_key(index_key)
        raw = await storage.get(keys.wf(child_id))
        if raw is None:
            continue
        try:
            child = records.decode_state(raw, key=keys.wf(child_id))
        except CorruptRecordError:
            continue  # quarantined by whoever loads it; it must not keep its parent open
        if child.status in TERMINAL_STATUSES or child.parent_close_policy == "abandon":
            continue
        if child.status == "running":
            if child.cancel_requested:
                continue  # asked already; its engine delivers it
            new = msgspec.structs.replace(child, cancel_requested=True, updated_at=now)
            plan.ops.append(Put(key=keys.wake(child_id), value=keys.wake_value()))
            plan.asked.append(child_id)
        else:  # pending or suspended: nobody drives it, so it ends here and now
            new = msgspec.structs.replace(
                child, status="cancelled", cancel_requested=True, updated_at=now, ended_at=now
            )
            for key, _ in await storage.scan(keys.wf(child_id) + ":p:"):
                plan.ops.append(Delete(key=key))
            if depth < MAX_DEPTH:
                await _add_children(storage, child_id, now, plan, depth + 1)
        plan.ops.append(Put(key=keys.wf(child_id), value=records.encode(new)))
        plan.ops += status_change_ops(child, new)
        plan.conditions.append(Expect(key=keys.wf(child_id), value=raw))
