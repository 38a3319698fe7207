"""Changing runs after the fact: attributes from outside, fork, purge, retention."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Mapping

from pyweft.clock import TimerHandle
from pyweft.engine import attributes, keys, quarantine, query, records
from pyweft.engine.core import EngineCore, create_ops
from pyweft.engine.query import RunFilter
from pyweft.engine.records import TERMINAL_STATUSES, WorkflowState
from pyweft.engine.recovery import load_run
from pyweft.engine.run import Run
from pyweft.engine.visibility import not_found
from pyweft.errors import (
    CorruptRecordError,
    InvalidArgumentError,
    WorkflowAlreadyExistsError,
    WorkflowNotRegisteredError,
)
from pyweft.storage.base import Delete, Expect, Op, Put

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
    from pyweft.engine.creation import check_id

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
    last = max(loaded.journal, default=0)
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
    journal = {s: r for s, r in loaded.journal.items() if s <= upto}
    applied = [u for u in loaded.applied if u.boundary <= upto]
    for step, rec in journal.items():
        ops.append(Put(key=keys.journal(workflow_id, step), value=records.encode(rec)))
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


async def purge_run(core: EngineCore, workflow_id: str) -> bool:
    """Delete a finished run and everything that belongs to it. False if not finished.

    Its idempotency key mapping is kept, so the key stays spent. Only the
    state and attributes are decoded (they name the index keys to delete), so
    a finished run with a damaged journal entry can still be purged; a damaged
    state record raises ``CorruptRecordError``.
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
    attrs_raw = stored.get(keys.attributes(workflow_id))
    attrs = (
        records.decode_attributes(attrs_raw, key=keys.attributes(workflow_id)) if attrs_raw else {}
    )
    doomed = [k for k, _ in rows]
    doomed += keys.index_keys(state.id, state.type, state.status, state.created_at)
    doomed += keys.extra_index_keys(state.id, state.created_at, state.parent_id, state.tags)
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
    """Purge every finished run matching ``flt``; running runs are skipped."""
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


class RetentionSweeper:
    """Deletes finished runs once their retention passes, in bounded batches."""

    def __init__(
        self,
        core: EngineCore,
        default: dict[str, float],
        interval_s: float,
        batch_size: int,
    ) -> None:
        self._core = core
        self._default = default
        self._interval = interval_s
        self._batch = batch_size
        self._timer: TimerHandle | None = None
        self._task: asyncio.Task[int] | None = None
        self._lock = asyncio.Lock()  # one pass at a time, background or on demand

    def retention_for(self, workflow_type: str, status: str) -> float | None:
        definition = self._core.workflows.get(workflow_type)
        if definition is not None and definition.retention and status in definition.retention:
            return definition.retention[status]
        return self._default.get(status)

    @property
    def active(self) -> bool:
        return bool(self._default) or any(d.retention for d in self._core.workflows.values())

    def start(self) -> None:
        if self.active:
            self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        clock = self._core.clock
        self._timer = clock.call_at(clock.now() + self._interval, self._due)

    def _due(self) -> None:
        if self._core.state != "open":
            return
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> int:
        try:
            return await self.sweep()
        except Exception:
            log.exception("retention sweep failed; it runs again next interval")
            return 0
        finally:
            if self._core.state == "open":
                self._arm()

    async def sweep(self) -> int:
        """One bounded pass: purge up to ``batch_size`` runs whose retention passed."""
        async with self._lock:
            return await self._sweep()

    async def _sweep(self) -> int:
        core, now = self._core, self._core.clock.now()
        purged = 0
        for status in sorted(TERMINAL_STATUSES):
            configured = [self._default.get(status)] + [
                (d.retention or {}).get(status) for d in core.workflows.values()
            ]
            shortest = min((r for r in configured if r is not None), default=None)
            if shortest is None:
                continue
            prefix = f"ix:end:{status}:"
            rows = await core.storage.scan(
                prefix, end=prefix + keys.ts16(now - shortest + 1e-6), limit=self._batch
            )
            for key, _ in rows:
                workflow_id = keys.id_from_index_key(key)
                raw = await core.storage.get(keys.wf(workflow_id))
                if raw is None:
                    await core.committer.commit([Delete(key=key)])
                    continue
                try:
                    state = records.decode_state(raw, key=keys.wf(workflow_id))
                    keep = self.retention_for(state.type, status)
                    ended = state.ended_at or state.updated_at
                    if keep is None or ended + keep > now:
                        continue
                    if await purge_run(core, workflow_id):
                        purged += 1
                except CorruptRecordError as exc:  # logged once; the sweep goes on
                    await quarantine.report(core, workflow_id, exc)
                    continue
                if purged >= self._batch:
                    return purged
        return purged
