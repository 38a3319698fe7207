"""Reading runs for people and tools: describe, list, history and results."""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyweft.codec import PayloadCodec
from pyweft.definitions import WorkflowDefinition
from pyweft.engine import keys, records
from pyweft.engine.info import Page, StepInfo, WorkflowInfo, to_datetime
from pyweft.engine.records import ALL_STATUSES, WorkflowState
from pyweft.engine.recovery import load_run
from pyweft.errors import (
    InvalidArgumentError,
    PyweftError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowTimeoutError,
)
from pyweft.storage.base import Storage

MAX_PAGE = 1000


@dataclass(frozen=True, kw_only=True, slots=True)
class HistoryEvent:
    """One entry of a run's history, derived from what is stored."""

    at: datetime
    kind: str  # created, step_completed, step_failed, step_open, update_applied, <terminal>
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
        raw = await self._storage.get(keys.wf(workflow_id))
        if raw is None:
            raise not_found(workflow_id)
        return raw, records.decode_state(raw)

    async def state(self, workflow_id: str) -> WorkflowState:
        return (await self.state_raw(workflow_id))[1]

    def _result(self, state: WorkflowState) -> Any:
        if state.result is None:
            return None
        try:
            definition = self._workflows.get(state.type)
            return self._codec.decode(state.result, definition.result_type if definition else Any)
        except PyweftError:
            return self._codec.decode(state.result)

    def _info(self, state: WorkflowState, step_count: int | None, updated: float) -> WorkflowInfo:
        return WorkflowInfo(
            id=state.id,
            workflow_type=state.type,
            version=state.version,
            status=state.status,
            created_at=to_datetime(state.created_at),
            updated_at=to_datetime(updated),
            step_count=step_count,
            result=self._result(state),
            error=state.error,
            cancel_requested=state.cancel_requested,
        )

    async def describe(self, workflow_id: str) -> WorkflowInfo:
        loaded = await load_run(self._storage, workflow_id)
        if loaded is None:
            raise not_found(workflow_id)
        updated = max([loaded.state.updated_at, *(r.finished_at for r in loaded.journal.values())])
        return self._info(loaded.state, len(loaded.journal), updated)

    async def history(self, workflow_id: str) -> History:
        loaded = await load_run(self._storage, workflow_id)
        if loaded is None:
            raise not_found(workflow_id)
        steps: list[StepInfo] = []
        for rec in loaded.journal.values():
            result = None
            if rec.ok and rec.value is not None:
                result = self._codec.decode(rec.value)
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
                )
            )
        steps.sort(key=lambda s: s.step)
        state = loaded.state
        events = [HistoryEvent(at=to_datetime(state.created_at), kind="created", detail=state.type)]
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

    async def list(
        self,
        *,
        status: str | None,
        workflow_type: str | None,
        limit: int,
        cursor: str | None,
    ) -> Page[WorkflowInfo]:
        if status is not None and status not in ALL_STATUSES:
            raise InvalidArgumentError(
                f"unknown status {status!r}; use one of: {', '.join(ALL_STATUSES)}"
            )
        if type(limit) is not int or not 1 <= limit <= MAX_PAGE:
            raise InvalidArgumentError(f"limit must be an int from 1 to {MAX_PAGE}, got {limit!r}")
        prefix = keys.list_prefix(status, workflow_type)
        end = _decode_cursor(cursor, prefix) if cursor is not None else None
        rows = await self._storage.scan(prefix, end=end, limit=limit + 1, reverse=True)
        more = len(rows) > limit
        rows = rows[:limit]
        ids = [keys.id_from_index_key(k) for k, _ in rows]
        raws = await asyncio.gather(*(self._storage.get(keys.wf(i)) for i in ids))
        items = []
        for raw in raws:
            if raw is not None:
                state = records.decode_state(raw)
                items.append(self._info(state, None, state.updated_at))
        next_cursor = _encode_cursor(rows[-1][0]) if more and rows else None
        return Page(items=items, next_cursor=next_cursor)


def _event_order(event: HistoryEvent) -> tuple[datetime, float]:
    """Time first; on a tie, creation, then steps in order, then the terminal state."""
    if event.kind == "created":
        return event.at, -1.0
    if event.step is None:
        return event.at, float("inf")
    return event.at, event.step - (0.5 if event.kind == "update_applied" else 0.0)


def _encode_cursor(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str, prefix: str) -> str:
    try:
        key = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        key = ""
    if not key.startswith(prefix):
        raise InvalidArgumentError(
            "cursor is not valid for this listing; pass the next_cursor returned by the "
            "previous page of the same query"
        )
    return key
