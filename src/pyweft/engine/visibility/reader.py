"""Reading runs for people and tools: describe, list, history and results."""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyweft.codec import PayloadCodec
from pyweft.codecs.encryption import EncryptedPayloadError
from pyweft.codecs.keyless import placeholder
from pyweft.definitions import WorkflowDefinition
from pyweft.engine.replay import keys, quarantine, records
from pyweft.engine.replay.info import (
    FAR_PAST,
    Page,
    ScheduleOrigin,
    StepInfo,
    WorkflowInfo,
    to_datetime,
)
from pyweft.engine.replay.records import ALL_STATUSES, WorkflowState
from pyweft.engine.replay.recovery import load_run
from pyweft.engine.steps import attributes
from pyweft.engine.visibility import integrity, query
from pyweft.engine.visibility.query import RunFilter
from pyweft.errors import (
    CorruptRecordError,
    InvalidArgumentError,
    PyweftError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowTimeoutError,
)
from pyweft.storage.base import Storage

MAX_PAGE = 1000
QUARANTINED = "quarantined"  # the status readers report for a quarantined run
UNREADABLE = "(unreadable)"  # a field of a run whose state record cannot be decoded


@dataclass(frozen=True, kw_only=True, slots=True)
class HistoryEvent:
    """One entry of a run's history, derived from what is stored."""

    at: datetime
    # created, scheduled, step_completed, step_failed, step_open, update_applied, <terminal>
    kind: str
    step: int | None = None
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class History:
    """What ``engine.history(id)`` returns: the steps, and every event in time order."""

    workflow_id: str
    steps: list[StepInfo]
    events: list[HistoryEvent]

    def __iter__(self) -> Iterator[StepInfo]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, index: int) -> StepInfo:
        return self.steps[index]


def not_found(workflow_id: str) -> WorkflowNotFoundError:
    return WorkflowNotFoundError(
        f"no workflow run with id {workflow_id!r} exists in this store",
        workflow_id=workflow_id,
    )


def outcome_of(
    state: WorkflowState, codec: PayloadCodec, workflows: dict[str, WorkflowDefinition]
) -> Any:
    """A terminal run's result, or the error ``result()`` raises for it."""
    if state.status == "completed":
        if state.result is None:
            return None
        definition = workflows.get(state.type)
        return codec.decode(state.result, definition.result_type if definition else Any)
    if state.status == "cancelled":
        raise WorkflowCancelledError(f"workflow {state.id!r} was cancelled", workflow_id=state.id)
    if state.status == "timed_out":
        raise WorkflowTimeoutError(
            f"workflow {state.id!r} exceeded its execution_timeout", workflow_id=state.id
        )
    err = state.error or records.ErrorInfo(type=state.status, message="")
    raise WorkflowFailedError(
        f"workflow {state.id!r} {state.status}: {err.type}: {err.message}",
        workflow_id=state.id,
        error_type=err.type,
        error_message=err.message,
    )


class Visibility:
    """Read-only queries over runs; never writes."""

    def __init__(
        self, storage: Storage, codec: PayloadCodec, workflows: dict[str, WorkflowDefinition]
    ) -> None:
        self._storage = storage
        self._codec = codec
        self._workflows = workflows

    async def state_raw(self, workflow_id: str) -> tuple[bytes, WorkflowState]:
        key = keys.wf(workflow_id)
        raw = await self._storage.get(key)
        if raw is None:
            raise not_found(workflow_id)
        return raw, records.decode_state(raw, key=key)

    async def state(self, workflow_id: str) -> WorkflowState:
        """The stored state; ``CorruptRecordError`` if the run is quarantined.

        A run that has not finished is checked for a quarantine marker, so that
        ``result()`` fails with the damaged key instead of waiting for ever.
        """
        state = (await self.state_raw(workflow_id))[1]
        if state.status not in records.TERMINAL_STATUSES:
            found = await quarantine.marker(self._storage, workflow_id)
            if found is not None:
                raise quarantine.error_of(found)
        return state

    def _result(self, state: WorkflowState) -> Any:
        if state.result is None:
            return None
        try:
            definition = self._workflows.get(state.type)
            return self._codec.decode(state.result, definition.result_type if definition else Any)
        except EncryptedPayloadError as exc:  # shown as what it is, not as a failure
            return placeholder(exc)
        except PyweftError:
            return self._shown(state.result)

    def _shown(self, data: bytes) -> Any:
        """A payload for display: an encrypted one this process has no key for is shown
        as ``<encrypted: aes-gcm, key ...>`` rather than failing the whole answer."""
        try:
            return self._codec.decode(data)
        except EncryptedPayloadError as exc:
            return placeholder(exc)

    def _listed_result(self, state: WorkflowState) -> Any:
        """The result for a listing, where one damaged payload must not fail the page."""
        try:
            return self._result(state)
        except PyweftError:
            return None

    def _quarantined(self, info: WorkflowInfo, exc: CorruptRecordError) -> WorkflowInfo:
        error = records.ErrorInfo(type=exc.code, message=str(exc), code=exc.code)
        return dataclasses.replace(info, status=QUARANTINED, error=error, corrupt_key=exc.key)

    def _unreadable(
        self, workflow_id: str, created_at: float | None, exc: CorruptRecordError
    ) -> WorkflowInfo:
        """A run whose state record cannot be decoded: what its keys still tell."""
        created = FAR_PAST if created_at is None else to_datetime(created_at)
        info = WorkflowInfo(
            id=workflow_id,
            workflow_type=UNREADABLE,
            version=UNREADABLE,
            status=QUARANTINED,
            created_at=created,
            updated_at=created,
        )
        return self._quarantined(info, exc)

    async def _created_at(self, workflow_id: str) -> float | None:
        """A run's creation time from its id index entry (for an unreadable state record)."""
        prefix = f"ix:id:{keys.enc(workflow_id)}:"
        for key, _ in await self._storage.scan(prefix, limit=1):
            stamp = key[len(prefix) :]
            if len(stamp) == 16 and stamp.isdigit():
                return int(stamp) / 1e6
        return None

    def _info(
        self,
        state: WorkflowState,
        step_count: int | None,
        updated: float,
        attrs: dict[str, Any] | None = None,
        *,
        listed: bool = False,
    ) -> WorkflowInfo:
        return WorkflowInfo(
            id=state.id,
            workflow_type=state.type,
            version=state.version,
            status=state.status,
            created_at=to_datetime(state.created_at),
            updated_at=to_datetime(updated),
            step_count=step_count,
            result=self._listed_result(state) if listed else self._result(state),
            error=state.error,
            cancel_requested=state.cancel_requested,
            parent_id=state.parent_id,
            tags=list(state.tags),
            attributes=attrs,
            forked_from=state.forked_from,
            forked_at_step=state.forked_at_step,
            schedule=_origin(state),
            queue=state.queue,
            drift=state.error.code_drift if state.error is not None else None,
        )

    async def describe(self, workflow_id: str) -> WorkflowInfo:
        """The run as stored; a run with a damaged record is reported ``quarantined``."""
        try:
            loaded = await load_run(self._storage, workflow_id)
        except CorruptRecordError as exc:
            return await self._describe_damaged(workflow_id, exc)
        if loaded is None:
            raise not_found(workflow_id)
        info = self._info(
            loaded.state, len(loaded.journal), loaded.state.updated_at, dict(loaded.attributes)
        )
        last = max((r.finished_at for r in loaded.journal.values()), default=None)
        beats = {
            p.step: self._shown(p.heartbeat)
            for p in loaded.pendings.values()
            if p.heartbeat is not None and p.step not in loaded.journal
        }
        return dataclasses.replace(
            info, last_step_at=None if last is None else to_datetime(last), heartbeats=beats
        )

    async def _describe_damaged(self, workflow_id: str, exc: CorruptRecordError) -> WorkflowInfo:
        key = keys.wf(workflow_id)
        raw = await self._storage.get(key)
        try:
            state = None if raw is None else records.decode_state(raw, key=key)
        except CorruptRecordError:
            state = None
        if state is None:
            return self._unreadable(workflow_id, await self._created_at(workflow_id), exc)
        info = self._info(state, None, state.updated_at, listed=True)
        return self._quarantined(info, exc)

    async def history(self, workflow_id: str) -> History:
        """Every step and event of a run; ``CorruptRecordError`` if a record is damaged."""
        loaded = await load_run(self._storage, workflow_id)
        if loaded is None:
            raise not_found(workflow_id)
        steps: list[StepInfo] = []
        for rec in loaded.journal.values():
            result = None
            if rec.ok and rec.value is not None:
                result = self._shown(rec.value)
            steps.append(
                StepInfo(
                    step=rec.step,
                    kind=rec.kind,
                    name=rec.name,
                    status="completed" if rec.ok else "failed",
                    attempts=rec.attempts,
                    started_at=to_datetime(rec.started_at),
                    finished_at=to_datetime(rec.finished_at),
                    result=result,
                    error=rec.error,
                )
            )
        for pend in loaded.pendings.values():
            if pend.step in loaded.journal:
                continue
            steps.append(
                StepInfo(
                    step=pend.step,
                    kind=pend.kind,
                    name=pend.name,
                    status="open",
                    attempts=pend.attempt,
                    started_at=to_datetime(pend.first_started_at),
                    finished_at=None,
                    error=pend.last_error,
                    next_attempt_at=to_datetime(pend.deadline) if pend.deadline else None,
                    heartbeat_details=None
                    if pend.heartbeat is None
                    else self._shown(pend.heartbeat),
                    heartbeat_at=(
                        None if pend.heartbeat_at is None else to_datetime(pend.heartbeat_at)
                    ),
                )
            )
        steps.sort(key=lambda s: s.step)
        state = loaded.state
        events = [HistoryEvent(at=to_datetime(state.created_at), kind="created", detail=state.type)]
        if state.schedule_id is not None and state.nominal_time is not None:
            occurrence = to_datetime(state.nominal_time).strftime("%Y-%m-%dT%H:%M:%SZ")
            events.append(
                HistoryEvent(
                    at=to_datetime(state.created_at),
                    kind="scheduled",
                    detail=f"schedule {state.schedule_id}, occurrence {occurrence}",
                )
            )
        for info in steps:
            kind = {"completed": "step_completed", "failed": "step_failed"}.get(
                info.status, "step_open"
            )
            at = info.finished_at or info.started_at
            events.append(
                HistoryEvent(at=at, kind=kind, step=info.step, detail=f"{info.kind} {info.name}")
            )
        for applied in loaded.applied:
            events.append(
                HistoryEvent(
                    at=to_datetime(applied.applied_at or state.created_at),
                    kind="update_applied",
                    step=applied.boundary,
                    detail=f"{applied.name} ({applied.update_id})",
                )
            )
        if state.status in records.TERMINAL_STATUSES:
            detail = state.error.type if state.error else ""
            events.append(
                HistoryEvent(at=to_datetime(state.updated_at), kind=state.status, detail=detail)
            )
        events.sort(key=_event_order)
        return History(workflow_id=workflow_id, steps=steps, events=events)

    async def list(self, flt: RunFilter, *, limit: int, cursor: str | None) -> Page[WorkflowInfo]:
        if type(limit) is not int or not 1 <= limit <= MAX_PAGE:
            raise InvalidArgumentError(f"limit must be an int from 1 to {MAX_PAGE}, got {limit!r}")
        after = query.decode_cursor(cursor) if cursor is not None else None
        items: list[WorkflowInfo] = []
        last: str | None = None
        more = False
        marked = await quarantine.markers(self._storage)
        async for position, state, _ in query.found(self._storage, flt, after):
            if len(items) == limit:
                more = True
                break
            if isinstance(state, CorruptRecordError):
                created = int(position.split(":", 1)[0]) / 1e6
                items.append(self._unreadable(keys.dec(position.split(":", 1)[1]), created, state))
            else:
                info = self._info(state, None, state.updated_at, listed=True)
                marker = marked.get(state.id)
                if marker is not None and not info.is_terminal:
                    info = self._quarantined(info, quarantine.error_of(marker))
                items.append(info)
            last = position
        next_cursor = query.encode_cursor(last) if more and last is not None else None
        return Page(items=items, next_cursor=next_cursor)

    async def aggregate(self, group_by: str, flt: RunFilter) -> builtins.list[Group]:
        """Counts of matching runs per status, type or attribute value."""
        if not isinstance(group_by, str) or not group_by:
            raise InvalidArgumentError(
                "group_by must be 'status', 'type', 'failure_category' or an attribute name"
            )
        attr = group_by[5:] if group_by.startswith("attr:") else None
        if group_by not in ("status", "type", "failure_category") and attr is None:
            attr = group_by
        if attr is not None:
            attributes.check_name(attr)
        counts: dict[Any, int] = {}
        if flt == RunFilter() and group_by != "failure_category":
            await self._count_index(group_by, attr, counts)
        else:
            async for _, state, attrs in query.matching(self._storage, flt):
                found: builtins.list[Any]
                if group_by == "status":
                    found = [state.status]
                elif group_by == "type":
                    found = [state.type]
                elif group_by == "failure_category":
                    found = [records.failure_category(state.status, state.error)]
                else:
                    values = attrs or await self._attrs(state.id)
                    value = values.get(attr or "")
                    found = list(value) if isinstance(value, builtins.list) else [value]
                for k in found:
                    if k is None:
                        continue  # like the index: runs without the attribute are not counted
                    counts[k] = counts.get(k, 0) + 1
        groups = [Group(key=k, count=n) for k, n in counts.items()]
        groups.sort(key=lambda g: (-g.count, str(g.key)))
        return groups

    async def check_records(
        self, *, progress: integrity.Progress | None = None
    ) -> integrity.StoreCheck:
        """Decode every record in the store and name each damaged key (``pyweft doctor``).

        Reads the whole store in pages; ``progress(done, total)`` is called after each.
        """
        return await integrity.check_records(self._storage, progress=progress)

    async def _attrs(self, workflow_id: str) -> dict[str, Any]:
        key = keys.attributes(workflow_id)
        raw = await self._storage.get(key)
        return records.decode_attributes(raw, key=key) if raw else {}

    async def _count_index(self, group_by: str, attr: str | None, counts: dict[Any, int]) -> None:
        storage = self._storage
        count = getattr(storage, "count", None)
        if group_by == "status":
            for status in ALL_STATUSES:
                prefix = f"ix:s:{status}:"
                n = await count(prefix) if count else len(await storage.scan(prefix))
                if n:
                    counts[status] = n
            return
        prefix = "ix:t:" if attr is None else attributes.index_prefix(attr)
        for key, _ in await storage.scan(prefix):
            part = key[len(prefix) :].split(":", 1)[0]
            try:
                value = keys.dec(part) if attr is None else attributes.decode_value(part)
            except (ValueError, OverflowError):
                continue  # an index key of an unknown form: doctor names it
            counts[value] = counts.get(value, 0) + 1


@dataclass(frozen=True, kw_only=True, slots=True)
class Group:
    """One bucket of ``engine.aggregate``."""

    key: Any
    count: int


def _event_order(event: HistoryEvent) -> tuple[datetime, float]:
    """Time first; on a tie, creation, then steps in order, then the terminal state."""
    if event.kind == "created":
        return event.at, -1.0
    if event.kind == "scheduled":
        return event.at, -0.75
    if event.step is None:
        return event.at, float("inf")
    return event.at, event.step - (0.5 if event.kind == "update_applied" else 0.0)


def _origin(state: WorkflowState) -> ScheduleOrigin | None:
    if state.schedule_id is None or state.nominal_time is None:
        return None
    return ScheduleOrigin(
        schedule_id=state.schedule_id, nominal_time=to_datetime(state.nominal_time)
    )
