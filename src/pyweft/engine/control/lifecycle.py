"""State transitions of runs that no task in this engine is driving.

When a run is live here, its own :class:`~pyweft.engine.replay.run.Run` writes its
state. Otherwise these helpers change the stored state directly, always with
a compare-and-swap on the bytes they read, so a racing writer is never
overwritten.
"""

from __future__ import annotations

import msgspec

from pyweft.engine.composition.children import close_plan
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.commit import Committer
from pyweft.engine.replay.driving import status_change_ops
from pyweft.engine.replay.records import WorkflowState
from pyweft.engine.visibility.reader import not_found
from pyweft.storage.base import Delete, Expect, Op, Put, Storage


async def transition(
    storage: Storage,
    committer: Committer,
    workflow_id: str,
    allowed_from: frozenset[str],
    now: float,
    *,
    wake: bool = False,
    rotate_claim: bool = False,
    extra_ops: list[Op] | None = None,
    extra_conds: list[Expect] | None = None,
    **changes: object,
) -> tuple[WorkflowState | None, WorkflowState]:
    """Move a stored run to new field values if its status is in ``allowed_from``.

    Returns ``(new_state, current_state)``; ``new_state`` is ``None`` when the
    run's status did not allow the change (nothing written). Retries when the
    record changes under it. ``wake`` also leaves a wake-up for the engine that
    may be driving the run in another process; ``rotate_claim`` takes the run
    away from its owner under ``ownership="workflow-lease"``; ``extra_ops`` and
    ``extra_conds`` ride in the same batch (e.g. taking a claim). A move to a
    finished status carries out the run's parent-close policies in the same batch
    (see :class:`~pyweft.engine.composition.children.ClosePlan`).
    """
    while True:
        raw = await storage.get(keys.wf(workflow_id))
        if raw is None:
            raise not_found(workflow_id)
        state = records.decode_state(raw)
        if state.status not in allowed_from:
            return None, state
        new = msgspec.structs.replace(state, updated_at=now, **changes)
        if new.status in records.TERMINAL_STATUSES and new.ended_at is None:
            new = msgspec.structs.replace(new, ended_at=now)
        ops: list[Op] = [Put(key=keys.wf(workflow_id), value=records.encode(new))]
        ops += status_change_ops(state, new)
        if wake:
            ops.append(Put(key=keys.wake(workflow_id), value=keys.wake_value()))
        conds = [Expect(key=keys.wf(workflow_id), value=raw), *(extra_conds or ())]
        if new.status in records.TERMINAL_STATUSES:
            for key, _ in await storage.scan(keys.wf(workflow_id) + ":p:"):
                ops.append(Delete(key=key))
            # Its children's close policies land with its end (a changed child: retry).
            plan = await close_plan(storage, workflow_id, now)
            ops += plan.ops
            conds += plan.conditions
        ops += extra_ops or ()
        if rotate_claim:
            from pyweft.engine.ownership.claims import rotation_ops

            more_ops, more_conds = await rotation_ops(storage, workflow_id)
            ops += more_ops
            conds += more_conds
        if await committer.commit(ops, conds):
            return new, state
        if extra_conds:
            return None, state  # the extra conditions (a claim) may be what failed
