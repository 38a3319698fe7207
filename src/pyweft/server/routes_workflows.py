"""REST endpoints for starting, reading and controlling runs."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from pyweft import InvalidArgumentError, ResultTimeoutError
from pyweft.client.wire import group_to_json, history_to_json, info_to_json, page_to_json
from pyweft.server import filters
from pyweft.server.calls import JSON, Call, Endpoint, field_of, refuse_unknown

RESULT_WAIT_DEFAULT_S = 30.0
RESULT_WAIT_MAX_S = 60.0

_START_FIELDS = {
    "type",
    "args",
    "id",
    "idempotency_key",
    "on_conflict",
    "execution_timeout",
    "start_delay",
    "start_at",
    "tags",
    "attributes",
    "headers",
}


def _duration(body: dict[str, Any], name: str) -> Any:
    return field_of(body, name, (int, float, str), None)


async def start(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, _START_FIELDS)
    wf_type = field_of(body, "type", str, None)
    if wf_type is None:
        raise InvalidArgumentError("'type' (the registered workflow name) is required")
    args = field_of(body, "args", list, [])
    tags = field_of(body, "tags", list, [])
    attributes = field_of(body, "attributes", dict, None)
    start_at = body.get("start_at")
    handle = await call.engine.start(
        wf_type,
        *args,
        id=field_of(body, "id", str, None),
        idempotency_key=field_of(body, "idempotency_key", str, None),
        on_conflict=field_of(body, "on_conflict", str, "fail"),
        execution_timeout=_duration(body, "execution_timeout"),
        start_delay=_duration(body, "start_delay"),
        start_at=None if start_at is None else filters.parse_time("start_at", start_at),
        tags=tags,
        attributes=attributes,  # indexed in the create write (issue 16)
        headers=field_of(body, "headers", dict, None),  # checked by the engine
    )
    return JSON({"id": handle.id}, status_code=201)


async def start_or_signal(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"type", "args", "id", "signal", "signal_payload", "signal_id"})
    wf_type = field_of(body, "type", str, None)
    name = field_of(body, "signal", str, None)
    if wf_type is None or name is None:
        raise InvalidArgumentError("'type' and 'signal' (the signal name) are required")
    handle, outcome = await call.engine.start_or_signal(
        wf_type,
        *field_of(body, "args", list, []),
        signal=(name, body.get("signal_payload")),
        id=field_of(body, "id", str, None),
        signal_id=field_of(body, "signal_id", str, None),
    )
    return JSON({"id": handle.id, "outcome": outcome}, status_code=201)


async def list_runs(call: Call) -> Response:
    flt, limit, cursor = filters.from_query(call.query, paging=True)
    page = await call.engine.list(**flt, limit=limit, cursor=cursor)
    return JSON(page_to_json(page))


async def aggregate(call: Call) -> Response:
    flt, _, _ = filters.from_query(call.query, paging=False)
    group_by = call.query.get("group_by")
    if not group_by:
        raise InvalidArgumentError("group_by is required: 'status', 'type' or an attribute name")
    groups = await call.engine.aggregate(group_by=group_by, **flt)
    return JSON({"groups": [group_to_json(g) for g in groups]})


async def describe(call: Call) -> Response:
    return JSON(info_to_json(await call.engine.describe(call.params["workflow_id"])))


async def result(call: Call) -> Response:
    wait_text = call.query.get("wait")
    wait = RESULT_WAIT_DEFAULT_S
    if wait_text is not None:
        try:
            wait = float(wait_text)
        except ValueError:
            raise InvalidArgumentError("wait must be a number of seconds") from None
        if not 0 <= wait <= RESULT_WAIT_MAX_S:
            raise InvalidArgumentError(f"wait must be from 0 to {RESULT_WAIT_MAX_S:g} seconds")
    workflow_id = call.params["workflow_id"]
    try:
        value = await call.while_connected(call.engine.result(workflow_id, timeout=wait))
    except TimeoutError as exc:
        if isinstance(exc, ResultTimeoutError):
            raise
        raise ResultTimeoutError(
            f"run {workflow_id!r} did not finish within {wait:g}s; ask again",
            workflow_id=workflow_id,
        ) from None
    return JSON({"id": workflow_id, "status": "completed", "result": value})


async def history(call: Call) -> Response:
    return JSON(history_to_json(await call.engine.history(call.params["workflow_id"])))


async def cancel(call: Call) -> Response:
    await call.engine.cancel(call.params["workflow_id"])
    return JSON({"ok": True})


async def suspend(call: Call) -> Response:
    await call.engine.suspend(call.params["workflow_id"])
    return JSON({"ok": True})


async def resume(call: Call) -> Response:
    await call.engine.resume(call.params["workflow_id"])
    return JSON({"ok": True})


async def fail(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"reason"})
    reason = field_of(body, "reason", str, None)
    if not reason:
        raise InvalidArgumentError("'reason' is required: say why the run is being failed")
    await call.engine.fail(call.params["workflow_id"], reason)
    return JSON({"ok": True})


async def fork(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"from_step", "id"})
    handle = await call.engine.fork(
        call.params["workflow_id"],
        from_step=field_of(body, "from_step", int, None),
        id=field_of(body, "id", str, None),
    )
    return JSON({"id": handle.id}, status_code=201)


async def get_attributes(call: Call) -> Response:
    info = await call.engine.describe(call.params["workflow_id"])
    return JSON({"attributes": info.attributes or {}})


async def set_attributes(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"attributes"})
    values = field_of(body, "attributes", dict, None)
    if values is None:
        raise InvalidArgumentError("'attributes' (an object; null removes one) is required")
    await call.engine.set_attributes(call.params["workflow_id"], values)
    return JSON({"ok": True})


_ID = "/workflows/{workflow_id}"
_OBJ: dict[str, Any] = {"type": "object"}
_FILTER_QUERY = (
    ("status", "string", "Run status; repeat for several (OR)."),
    ("type", "string", "Workflow type."),
    ("id_prefix", "string", "Runs whose id starts with this."),
    ("parent_id", "string", "Children of this run."),
    ("tag", "string", "A tag; repeat for several (AND)."),
    ("failure_category", "string", "Why runs failed: application, timeout, cancellation, ..."),
    ("created_after", "string", "ISO 8601 time or epoch seconds."),
    ("created_before", "string", "ISO 8601 time or epoch seconds."),
    ("updated_after", "string", "ISO 8601 time or epoch seconds."),
    ("updated_before", "string", "ISO 8601 time or epoch seconds."),
)

ENDPOINTS = (
    Endpoint(
        method="POST",
        path="/workflows",
        handler=start,
        scopes=("workflows:write",),
        summary="Start a run",
        body={
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": {"type": "string"},
                "args": {"type": "array"},
                "id": {"type": "string"},
                "idempotency_key": {"type": "string"},
                "on_conflict": {"enum": ["fail", "use_existing"]},
                "execution_timeout": {"type": ["number", "string"]},
                "start_delay": {"type": ["number", "string"]},
                "start_at": {"type": ["number", "string"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "attributes": _OBJ,
                "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        responses={201: "Started (or the existing run, with on_conflict=use_existing)"},
    ),
    Endpoint(
        method="GET",
        path="/workflows",
        handler=list_runs,
        scopes=("workflows:read",),
        summary="List runs, newest first",
        query=(
            *_FILTER_QUERY,
            ("limit", "integer", "Page size, 1 to 1000 (default 100)."),
            ("cursor", "string", "next_cursor of the previous page."),
        ),
    ),
    Endpoint(
        method="GET",
        path="/workflows/aggregate",
        handler=aggregate,
        scopes=("workflows:read",),
        summary="Count runs per status, type or attribute",
        query=(
            ("group_by", "string", "status, type, failure_category or an attribute name."),
            *_FILTER_QUERY,
        ),
    ),
    Endpoint(
        method="POST",
        path="/workflows/start-or-signal",
        handler=start_or_signal,
        scopes=("workflows:write",),
        summary="Start a run with a signal buffered, or signal it if it exists",
        body={
            "type": "object",
            "required": ["type", "signal"],
            "properties": {
                "type": {"type": "string"},
                "args": {"type": "array"},
                "id": {"type": "string"},
                "signal": {"type": "string"},
                "signal_payload": {},
                "signal_id": {"type": "string"},
            },
        },
        responses={201: "Started or signalled"},
    ),
    Endpoint(
        method="GET",
        path=_ID,
        handler=describe,
        scopes=("workflows:read",),
        summary="Describe a run",
    ),
    Endpoint(
        method="GET",
        path=_ID + "/result",
        handler=result,
        scopes=("workflows:read",),
        summary="Wait for a run's result (long poll)",
        query=(("wait", "number", "Seconds to wait, 0 to 60 (default 30)."),),
        responses={200: "Completed", 408: "Still running", 422: "Failed, cancelled, timed out"},
    ),
    Endpoint(
        method="GET",
        path=_ID + "/history",
        handler=history,
        scopes=("workflows:read", "events:read"),
        summary="A run's steps and events",
    ),
    Endpoint(
        method="POST",
        path=_ID + "/cancel",
        handler=cancel,
        scopes=("workflows:write",),
        summary="Cancel a run",
    ),
    Endpoint(
        method="POST",
        path=_ID + "/suspend",
        handler=suspend,
        scopes=("workflows:write",),
        summary="Suspend a run",
    ),
    Endpoint(
        method="POST",
        path=_ID + "/resume",
        handler=resume,
        scopes=("workflows:write",),
        summary="Resume a suspended or blocked run",
    ),
    Endpoint(
        method="POST",
        path=_ID + "/fail",
        handler=fail,
        scopes=("workflows:admin",),
        summary="End a run nobody drives as failed",
        body={
            "type": "object",
            "required": ["reason"],
            "properties": {"reason": {"type": "string"}},
        },
    ),
    Endpoint(
        method="POST",
        path=_ID + "/fork",
        handler=fork,
        scopes=("workflows:write",),
        summary="Start a new run from a run's journal",
        body={
            "type": "object",
            "properties": {"from_step": {"type": "integer"}, "id": {"type": "string"}},
        },
        responses={201: "Forked"},
    ),
    Endpoint(
        method="GET",
        path=_ID + "/attributes",
        handler=get_attributes,
        scopes=("attributes:read",),
        summary="A run's search attributes",
        tag="attributes",
    ),
    Endpoint(
        method="PATCH",
        path=_ID + "/attributes",
        handler=set_attributes,
        scopes=("attributes:write",),
        summary="Merge search attributes (null removes one)",
        body={"type": "object", "required": ["attributes"], "properties": {"attributes": _OBJ}},
        tag="attributes",
    ),
)
