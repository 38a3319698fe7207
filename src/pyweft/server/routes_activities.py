"""REST endpoints for activities completed by token (``complete_async``): the pending
list, and complete, fail or heartbeat an attempt. The token travels in the body, not
the path, so it stays out of access logs."""

from __future__ import annotations

from starlette.responses import Response

from pyweft import InvalidArgumentError
from pyweft.server.calls import JSON, Call, Endpoint, field_of, refuse_unknown

PENDING_MAX = 500


def _token(body: dict[str, object]) -> str:
    token = field_of(body, "token", str, None)
    if not token:
        raise InvalidArgumentError("'token' (from the activity's complete_async()) is required")
    return str(token)


async def pending(call: Call) -> Response:
    q = call.query
    unknown = set(q) - {"workflow_id", "limit"}
    if unknown:
        raise InvalidArgumentError(
            f"unknown query parameter(s) {', '.join(sorted(unknown))}; accepted: workflow_id, limit"
        )
    text = q.get("limit", "50")
    if not text.isdigit() or not 1 <= int(text) <= PENDING_MAX:
        raise InvalidArgumentError(f"limit must be a whole number from 1 to {PENDING_MAX}")
    items = await call.engine.pending_activities(q.get("workflow_id"), limit=int(text))
    return JSON({"items": items})


async def complete(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"token", "result"})
    await call.engine.complete_activity(_token(body), body.get("result"))
    return JSON({"ok": True})


async def fail(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"token", "error"})
    error = field_of(body, "error", str, None)
    if not error:
        raise InvalidArgumentError("'error' (a message saying why the activity failed) is required")
    await call.engine.fail_activity(_token(body), error)
    return JSON({"ok": True})


async def heartbeat(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"token", "details"})
    await call.engine.heartbeat_activity(_token(body), body.get("details"))
    return JSON({"ok": True})


_TOKEN = {"type": "string"}
_WRITE = ("workflows:write", "workers:write")

ENDPOINTS = (
    Endpoint(
        method="GET",
        path="/activities/pending",
        handler=pending,
        scopes=("workflows:read",),
        summary="Activities waiting for completion by token",
        query=(
            ("workflow_id", "string", "Only this run's (otherwise every running run's)."),
            ("limit", "integer", f"At most this many, 1 to {PENDING_MAX} (default 50)."),
        ),
        tag="activities",
    ),
    Endpoint(
        method="POST",
        path="/activities/complete",
        handler=complete,
        scopes=_WRITE,
        summary="Complete an activity attempt by its token",
        body={
            "type": "object",
            "required": ["token"],
            "properties": {"token": _TOKEN, "result": {}},
        },
        tag="activities",
    ),
    Endpoint(
        method="POST",
        path="/activities/fail",
        handler=fail,
        scopes=_WRITE,
        summary="Fail an activity attempt by its token (retried per its policy)",
        body={
            "type": "object",
            "required": ["token", "error"],
            "properties": {"token": _TOKEN, "error": {"type": "string"}},
        },
        tag="activities",
    ),
    Endpoint(
        method="POST",
        path="/activities/heartbeat",
        handler=heartbeat,
        scopes=_WRITE,
        summary="Keep an activity attempt alive and record its progress",
        body={
            "type": "object",
            "required": ["token"],
            "properties": {"token": _TOKEN, "details": {}},
        },
        tag="activities",
    ),
)
