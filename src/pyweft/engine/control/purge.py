"""Deleting finished runs for good: ``engine.purge`` and the retention sweep's deletes.

A run is deleted with everything that belongs to it (journal, indexes, buffered
messages, update answers, reviews, published events and streams) in one batch
conditioned on its state, except its ``start`` idempotency key, which stays
spent. A finished child whose parent still waits for it
(``parent_close_policy="await"``, the parent's child step not yet recorded) is
kept: the parent reads the child's stored outcome when it
records that step, and after a crash, a failed commit or a suspend it reads it
again.
"""

from __future__ import annotations

import dataclasses
import logging

from pyweft.engine.control.core import EngineCore
from pyweft.engine.messages import published
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.records import TERMINAL_STATUSES, WorkflowState
from pyweft.engine.steps import attributes
from pyweft.engine.visibility import query
from pyweft.engine.visibility.query import RunFilter
from pyweft.errors import CorruptRecordError, InvalidArgumentError
from pyweft.storage.base import Delete, Expect, Op, Storage

log = logging.getLogger("pyweft.maintenance")


async def awaited_by_parent(storage: Storage, state: WorkflowState) -> bool:
    """True while an unfinished parent has not yet recorded this child's outcome.

    The parent's open child step (its ``wf:{parent}:p:`` record naming this child)
    is written with the child's creation and deleted in the commit that records the
    outcome, so its absence means the parent holds the result durably (or never
    will need it: the parent ended). Once gone it never comes back, so no condition
    on it is needed in the delete batch.
    """
    parent_id = state.parent_id
    if parent_id is None or state.parent_close_policy != "await":
        return False
    parent_key = keys.wf(parent_id)
    parent_raw = await storage.get(parent_key)
    if parent_raw is None:
        return False
    try:
        parent = records.decode_state(parent_raw, key=parent_key)
    except CorruptRecordError:
        return True  # cannot tell whether it still needs the child: keep it
    if parent.status in TERMINAL_STATUSES:
        return False
    for key, raw in await storage.scan(keys.pending_prefix(parent_id)):
        try:
            open_step = records.decode_pending(raw, key=key)
        except CorruptRecordError:
            return True
        if open_step.kind == "child" and open_step.ref == state.id:
            return True
    return False


async def purge_run(core: EngineCore, workflow_id: str) -> bool:
    """Delete a finished run and everything that belongs to it.

    False (nothing deleted) when the run is not finished, or is a child its
    unfinished parent still awaits (see :func:`awaited_by_parent`). Its idempotency
    key mapping is kept, so the key stays spent. Only the state and attributes are
    decoded (they name the index keys to delete), so a finished run with a damaged
    journal entry can still be purged; a damaged state record raises
    ``CorruptRecordError``.
    """
    storage = core.storage
    prefix, start, end = keys.run_range(workflow_id)
    rows = [(k, v) for k, v in await storage.scan(prefix, start=start, end=end)]
    rows = [(k, v) for k, v in rows if keys.belongs_to_run(k, prefix)]
    stored = dict(rows)
    state_raw = stored.get(prefix)
    if state_raw is None:
        return False
    state = records.decode_state(state_raw, key=prefix)
    if state.status not in TERMINAL_STATUSES:
        return False
    if await awaited_by_parent(storage, state):
        log.debug("keeping %r: its parent %r has not recorded it yet", state.id, state.parent_id)
        return False
    attrs_raw = stored.get(keys.attributes(workflow_id))
    attrs = (
        records.decode_attributes(attrs_raw, key=keys.attributes(workflow_id)) if attrs_raw else {}
    )
    doomed = [k for k, _ in rows]
    doomed += keys.index_keys(state.id, state.type, state.status, state.created_at)
    doomed += keys.extra_index_keys(
        state.id, state.created_at, state.parent_id, state.tags, state.schedule_id
    )
    doomed.append(keys.updated_index(state.id, state.updated_at))
    doomed.append(keys.end_index(state.status, state.ended_at or state.updated_at, state.id))
    for name, value in attrs.items():
        for enc in attributes.index_values(value):
            doomed.append(attributes.index_key(name, enc, state.created_at, state.id))
    for scan_prefix in (
        keys.signal_prefix(workflow_id),
        f"sigres:{keys.enc(workflow_id)}:",
        keys.update_prefix(workflow_id),
        f"upk:{keys.enc(workflow_id)}:",
        keys.query_prefix(workflow_id),
        keys.query_responses_prefix(workflow_id),
        keys.state_prefix(workflow_id),
        published.prefix(workflow_id),  # events and stream chunks it published
    ):
        doomed += [k for k, _ in await storage.scan(scan_prefix)]
    doomed.append(keys.signal_seq(workflow_id))
    updates_prefix = keys.run_updates_prefix(workflow_id)
    for key, _ in await storage.scan(updates_prefix):
        update_id = keys.dec(key[len(updates_prefix) :])
        doomed += [key, keys.update_owner(update_id), keys.update_response(update_id)]
    for key, _ in await storage.scan(f"rvw:{keys.enc(workflow_id)}:"):
        review_id = keys.id_from_index_key(key)
        raw = await storage.get(keys.review(review_id))
        if raw is not None:
            doomed.append(keys.review(review_id))
            try:
                review = records.decode_review(raw, key=keys.review(review_id))
            except CorruptRecordError:
                pass  # its index entry stays behind; doctor reports the orphan
            else:
                doomed.append(keys.review_index(review.status, review.created_at, review_id))
        doomed.append(key)
    ops: list[Op] = [Delete(key=k) for k in dict.fromkeys(doomed)]
    return await core.committer.commit(ops, [Expect(key=prefix, value=state_raw)])


async def purge(core: EngineCore, flt: RunFilter) -> int:
    """Purge every finished run matching ``flt``; running runs and awaited children are
    skipped."""
    core.services_or_raise()
    statuses = flt.statuses or tuple(sorted(TERMINAL_STATUSES))
    if any(s not in TERMINAL_STATUSES for s in statuses):
        raise InvalidArgumentError("purge only deletes finished runs; filter on terminal statuses")
    narrowed = dataclasses.replace(flt, statuses=statuses)
    victims = [state.id async for _, state, _ in query.matching(core.storage, narrowed)]
    purged = 0
    for workflow_id in victims:
        try:
            if await purge_run(core, workflow_id):
                purged += 1
        except CorruptRecordError as exc:  # damaged since it was listed: leave it, go on
            log.warning("not purging %r: %s", workflow_id, exc)
    return purged
