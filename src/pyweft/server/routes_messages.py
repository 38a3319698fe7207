"""REST endpoints for messages to runs (signals, queries, updates) and human reviews."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from pyweft import InvalidArgumentError
from pyweft.client.wire import review_to_json
from pyweft.server.calls import JSON, Call, Endpoint, field_of, refuse_unknown

MAX_WAIT_S = 60.0


def _timeout(body: dict[str, Any], default: float) -> float:
    value = field_of(body, "timeout", (int, float), default)
    if not 0 < value <= MAX_WAIT_S:
        raise InvalidArgumentError(f"timeout must be more than 0 and at most {MAX_WAIT_S:g}s")
    return float(value)


async def signal(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"payload", "signal_id"})
    await call.engine.signal(
        call.params["workflow_id"],
        call.params["name"],
        body.get("payload"),
        signal_id=field_of(body, "signal_id", str, None),
    )
    return JSON({"ok": True})


async def query(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"args", "timeout"})
    asked = call.engine.query(
        call.params["workflow_id"],
        call.params["name"],
        *field_of(body, "args", list, []),
        timeout=_timeout(body, 5.0),
    )
    value = await call.while_connected(asked)  # an abandoned question is taken back
    return JSON({"result": value})


async def update(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"payload", "timeout", "idempotency_key"})
    extra: tuple[Any, ...] = (body["payload"],) if "payload" in body else ()
    sent = call.engine.update(
        call.params["workflow_id"],
        call.params["name"],
        *extra,
        timeout=_timeout(body, 5.0),
        idempotency_key=field_of(body, "idempotency_key", str, None),
    )
    # A client gone mid-wait ends the wait only: a stored update is still applied.
    value = await call.while_connected(sent)
    return JSON({"result": value})


async def update_result(call: Call) -> Response:
    text = call.query.get("wait", "0")
    try:
        wait = float(text)
    except ValueError:
        raise InvalidArgumentError("wait must be a number of seconds") from None
    if not 0 <= wait <= MAX_WAIT_S:
        raise InvalidArgumentError(f"wait must be from 0 to {MAX_WAIT_S:g} seconds")
    value = await call.while_connected(
        call.engine.update_result(call.params["update_id"], timeout=wait)
    )
    return JSON({"result": value})


async def list_reviews(call: Call) -> Response:
    q = call.query
    unknown = set(q) - {"status", "workflow_id", "review_type"}
    if unknown:
        raise InvalidArgumentError(f"unknown query parameter(s) {', '.join(sorted(unknown))}")
    status = q.get("status", "pending")
    reviews = await call.engine.list_reviews(
        status=None if status == "all" else status,
        workflow_id=q.get("workflow_id"),
        review_type=q.get("review_type"),
    )
    return JSON({"items": [review_to_json(r) for r in reviews]})


async def decide_review(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"decision", "reviewer", "feedback"})
    decision = field_of(body, "decision", str, None)
    if decision not in ("approved", "rejected", "needs_changes"):
        raise InvalidArgumentError("decision must be 'approved', 'rejected' or 'needs_changes'")
    reviewer = field_of(body, "reviewer", str, None) or call.principal.subject
    await call.engine.submit_review(
        call.params["review_id"],
        decision,
        reviewer=reviewer,
        feedback=field_of(body, "feedback", str, None),
    )
    return JSON({"ok": True})


_ID = "/workflows/{workflow_id}"
_TIMEOUT = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_WAIT_S}

ENDPOINTS = (
    Endpoint(
        method="POST",
        path=_ID + "/signal/{name}",
        handler=signal,
        scopes=("signals:write",),
        summary="Send a signal (durable when this answers)",
        body={"type": "object", "properties": {"payload": {}, "signal_id": {"type": "string"}}},
        tag="messages",
    ),
    Endpoint(
        method="POST",
        path=_ID + "/query/{name}",
        handler=query,
        scopes=("queries:read",),
        summary="Ask a live run a question",
        body={"type": "object", "properties": {"args": {"type": "array"}, "timeout": _TIMEOUT}},
        tag="messages",
    ),
    Endpoint(
        method="POST",
        path=_ID + "/update/{name}",
        handler=update,
        scopes=("updates:write",),
        summary="Send an update and wait for the answer",
        body={
            "type": "object",
            "properties": {
                "payload": {},
                "timeout": _TIMEOUT,
                "idempotency_key": {"type": "string"},
            },
        },
        responses={200: "Answered", 408: "No answer yet (details.update_id)"},
        tag="messages",
    ),
    Endpoint(
        method="GET",
        path="/updates/{update_id}",
        handler=update_result,
        scopes=("updates:write", "workflows:read"),
        summary="The answer to an earlier update",
        query=(("wait", "number", "Seconds to wait for it, 0 to 60 (default 0)."),),
        responses={200: "Answered", 408: "Not answered yet"},
        tag="messages",
    ),
    Endpoint(
        method="GET",
        path="/reviews",
        handler=list_reviews,
        scopes=("reviews:read",),
        summary="List reviews, oldest first",
        query=(
            ("status", "string", "pending (default), approved, rejected, ... or all."),
            ("workflow_id", "string", "Reviews of this run."),
            ("review_type", "string", "Reviews of this type."),
        ),
        tag="reviews",
    ),
    Endpoint(
        method="POST",
        path="/reviews/{review_id}/decision",
        handler=decide_review,
        scopes=("reviews:write",),
        summary="Decide a pending review",
        body={
            "type": "object",
            "required": ["decision"],
            "properties": {
                "decision": {"enum": ["approved", "rejected", "needs_changes"]},
                "reviewer": {"type": "string"},
                "feedback": {"type": "string"},
            },
        },
        tag="reviews",
    ),
)
