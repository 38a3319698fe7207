"""The JSON shapes of the HTTP API, written by the server and read back by the client.

Kept in one module so both ends agree: every record the engine returns has a
``*_to_json`` here and a ``*_from_json`` that rebuilds the same public dataclass.
User payloads (inputs, results, signal payloads) travel as plain JSON; values JSON
cannot hold natively are encoded by msgspec (datetimes as RFC 3339 strings, sets
and tuples as arrays, dataclasses as objects).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from pyweft import (
    CodeDrift,
    DriftCall,
    ErrorInfo,
    Group,
    History,
    HistoryEvent,
    Page,
    ReviewInfo,
    StepInfo,
    WorkflowEvent,
    WorkflowInfo,
)


def _enc_hook(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)  # pydantic models
    if callable(dump):
        return dump(mode="json")
    raise NotImplementedError(f"cannot encode a {type(value).__name__} as JSON")


_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)
_decoder = msgspec.json.Decoder()


def dumps(value: Any) -> bytes:
    return _encoder.encode(value)


def loads(data: bytes) -> Any:
    return _decoder.decode(data)


def _ts(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _dt(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _req_dt(value: Any) -> datetime:
    return datetime.fromisoformat(value)


def error_to_json(error: ErrorInfo | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {
        "type": error.type,
        "message": error.message,
        "code": error.code,
        "category": error.category,
    }


def error_from_json(data: Any) -> ErrorInfo | None:
    if data is None:
        return None
    return ErrorInfo(
        type=data["type"],
        message=data["message"],
        code=data.get("code"),
        category=data.get("category"),
    )


def drift_to_json(drift: CodeDrift | None) -> dict[str, Any] | None:
    if drift is None:
        return None

    def side(call: DriftCall) -> dict[str, Any]:
        return {"kind": call.kind, "name": call.name, "args": call.args, "detail": call.detail}

    return {
        "reason": drift.reason,
        "step": drift.step,
        "recorded": side(drift.recorded),
        "requested": side(drift.requested),
    }


def drift_from_json(data: Any) -> CodeDrift | None:
    if not isinstance(data, dict):
        return None

    def side(raw: dict[str, Any]) -> DriftCall:
        return DriftCall(
            kind=raw.get("kind"),
            name=raw.get("name"),
            args=raw.get("args"),
            detail=raw.get("detail"),
        )

    return CodeDrift(
        reason=data["reason"],
        step=data.get("step"),
        recorded=side(data["recorded"]),
        requested=side(data["requested"]),
    )


def info_to_json(info: WorkflowInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "workflow_type": info.workflow_type,
        "version": info.version,
        "status": info.status,
        "created_at": _ts(info.created_at),
        "updated_at": _ts(info.updated_at),
        "step_count": info.step_count,
        "result": info.result,
        "error": error_to_json(info.error),
        "failure_category": info.failure_category,  # (derived from status and error)
        "cancel_requested": info.cancel_requested,
        "parent_id": info.parent_id,
        "tags": list(info.tags),
        "attributes": info.attributes,
        "forked_from": info.forked_from,
        "forked_at_step": info.forked_at_step,
        "last_step_at": _ts(info.last_step_at),
        "corrupt_key": info.corrupt_key,
        "drift": drift_to_json(info.drift),
    }


def info_from_json(data: dict[str, Any]) -> WorkflowInfo:
    return WorkflowInfo(
        id=data["id"],
        workflow_type=data["workflow_type"],
        version=data["version"],
        status=data["status"],
        created_at=_req_dt(data["created_at"]),
        updated_at=_req_dt(data["updated_at"]),
        step_count=data.get("step_count"),
        result=data.get("result"),
        error=error_from_json(data.get("error")),
        cancel_requested=bool(data.get("cancel_requested")),
        parent_id=data.get("parent_id"),
        tags=list(data.get("tags") or []),
        attributes=data.get("attributes"),
        forked_from=data.get("forked_from"),
        forked_at_step=data.get("forked_at_step"),
        last_step_at=_dt(data.get("last_step_at")),
        corrupt_key=data.get("corrupt_key"),
        drift=drift_from_json(data.get("drift")),
    )


def page_to_json(page: Page[WorkflowInfo]) -> dict[str, Any]:
    return {"items": [info_to_json(i) for i in page.items], "next_cursor": page.next_cursor}


def page_from_json(data: dict[str, Any]) -> Page[WorkflowInfo]:
    return Page(
        items=[info_from_json(i) for i in data["items"]], next_cursor=data.get("next_cursor")
    )


def group_to_json(group: Group) -> dict[str, Any]:
    return {"key": group.key, "count": group.count}


def group_from_json(data: dict[str, Any]) -> Group:
    return Group(key=data["key"], count=data["count"])


def step_to_json(step: StepInfo) -> dict[str, Any]:
    return {
        "step": step.step,
        "kind": step.kind,
        "name": step.name,
        "status": step.status,
        "attempts": step.attempts,
        "started_at": _ts(step.started_at),
        "finished_at": _ts(step.finished_at),
        "result": step.result,
        "error": error_to_json(step.error),
        "next_attempt_at": _ts(step.next_attempt_at),
        # An activity in flight: its latest heartbeat's details (progress), and when.
        "heartbeat_details": step.heartbeat_details,
        "heartbeat_at": _ts(step.heartbeat_at),
    }


def step_from_json(data: dict[str, Any]) -> StepInfo:
    return StepInfo(
        step=data["step"],
        kind=data["kind"],
        name=data["name"],
        status=data["status"],
        attempts=data["attempts"],
        started_at=_req_dt(data["started_at"]),
        finished_at=_dt(data.get("finished_at")),
        result=data.get("result"),
        error=error_from_json(data.get("error")),
        next_attempt_at=_dt(data.get("next_attempt_at")),
        heartbeat_details=data.get("heartbeat_details"),
        heartbeat_at=_dt(data.get("heartbeat_at")),
    )


def history_to_json(history: History) -> dict[str, Any]:
    return {
        "workflow_id": history.workflow_id,
        "steps": [step_to_json(s) for s in history.steps],
        "events": [
            {"at": _ts(e.at), "kind": e.kind, "step": e.step, "detail": e.detail}
            for e in history.events
        ],
    }


def history_from_json(data: dict[str, Any]) -> History:
    return History(
        workflow_id=data["workflow_id"],
        steps=[step_from_json(s) for s in data["steps"]],
        events=[
            HistoryEvent(at=_req_dt(e["at"]), kind=e["kind"], step=e["step"], detail=e["detail"])
            for e in data["events"]
        ],
    )


def review_to_json(review: ReviewInfo) -> dict[str, Any]:
    return {
        "review_id": review.review_id,
        "workflow_id": review.workflow_id,
        "workflow_type": review.workflow_type,
        "review_type": review.review_type,
        "status": review.status,
        "reviewers": list(review.reviewers),
        "artifact": review.artifact,
        "created_at": _ts(review.created_at),
        "deadline": _ts(review.deadline),
        "reviewer": review.reviewer,
        "feedback": review.feedback,
        "decided_at": _ts(review.decided_at),
    }


def review_from_json(data: dict[str, Any]) -> ReviewInfo:
    return ReviewInfo(
        review_id=data["review_id"],
        workflow_id=data["workflow_id"],
        workflow_type=data["workflow_type"],
        review_type=data["review_type"],
        status=data["status"],
        reviewers=list(data["reviewers"]),
        artifact=data.get("artifact"),
        created_at=_req_dt(data["created_at"]),
        deadline=_dt(data.get("deadline")),
        reviewer=data.get("reviewer"),
        feedback=data.get("feedback"),
        decided_at=_dt(data.get("decided_at")),
    )


def event_to_json(event: WorkflowEvent) -> dict[str, Any]:
    return {
        "kind": event.kind,
        "workflow_id": event.workflow_id,
        "workflow_type": event.workflow_type,
        "at": _ts(event.at),
        "step": event.step,
        "data": event.data,
    }


def event_from_json(data: dict[str, Any]) -> WorkflowEvent:
    return WorkflowEvent(
        kind=data["kind"],
        workflow_id=data["workflow_id"],
        workflow_type=data["workflow_type"],
        at=_req_dt(data["at"]),
        step=data.get("step"),
        data=dict(data.get("data") or {}),
    )
