"""REST endpoints for schedules: list, describe (with the next fire times), create,
edit, pause, resume, trigger, backfill and delete. Thin over ``engine.schedules``."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from pyweft import InvalidArgumentError
from pyweft.server import filters
from pyweft.server.calls import JSON, Call, Endpoint, field_of, refuse_unknown

PREVIEW_DEFAULT = 5
PREVIEW_MAX = 100

_OPTIONS = ("timezone", "overlap", "catchup", "description")
_DURATIONS = ("every", "catchup_window", "jitter")
_TIMES = ("start_at", "end_at")


def _options(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if body.get("cron") is not None:
        out["cron"] = field_of(body, "cron", str, None)
    for name in _OPTIONS:
        if name in body:
            out[name] = field_of(body, name, str, None)
    for name in _DURATIONS:
        if body.get(name) is not None:
            out[name] = field_of(body, name, (int, float, str), None)
    for name in _TIMES:
        if name in body:
            raw = body[name]
            out[name] = None if raw is None else filters.parse_time(name, raw)
    return out


async def list_schedules(call: Call) -> Response:
    q = call.query
    unknown = set(q) - {"type", "paused"}
    if unknown:
        raise InvalidArgumentError(
            f"unknown query parameter(s) {', '.join(sorted(unknown))}; accepted: type, paused"
        )
    paused_text = q.get("paused")
    if paused_text not in (None, "true", "false"):
        raise InvalidArgumentError("paused must be 'true' or 'false'")
    items = await call.engine.schedules.list(
        workflow_type=q.get("type"), paused=None if paused_text is None else paused_text == "true"
    )
    return JSON({"items": items})


async def describe_schedule(call: Call) -> Response:
    text = call.query.get("preview", str(PREVIEW_DEFAULT))
    if not text.isdigit() or not 1 <= int(text) <= PREVIEW_MAX:
        raise InvalidArgumentError(f"preview must be a whole number from 1 to {PREVIEW_MAX}")
    sid = call.params["schedule_id"]
    info = await call.engine.schedules.get(sid)
    upcoming = await call.engine.schedules.preview(sid, int(text)) if info.next_fire else []
    return JSON({"schedule": info, "next_fires": upcoming})


_CREATE_FIELDS = {"id", "type", "args", "paused", "cron", *_OPTIONS, *_DURATIONS, *_TIMES}


async def create_schedule(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, _CREATE_FIELDS)
    sid = field_of(body, "id", str, None)
    wf_type = field_of(body, "type", str, None)
    if sid is None or wf_type is None:
        raise InvalidArgumentError(
            "'id' (the schedule's id) and 'type' (the workflow) are required"
        )
    info = await call.engine.schedules.create(
        sid,
        wf_type,
        *field_of(body, "args", list, []),
        paused=field_of(body, "paused", bool, False),
        **_options(body),
    )
    return JSON(info, status_code=201)


async def update_schedule(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"cron", *_OPTIONS, *_DURATIONS, *_TIMES})
    info = await call.engine.schedules.update(call.params["schedule_id"], **_options(body))
    return JSON(info)


async def pause(call: Call) -> Response:
    return JSON(await call.engine.schedules.pause(call.params["schedule_id"]))


async def resume(call: Call) -> Response:
    return JSON(await call.engine.schedules.resume(call.params["schedule_id"]))


async def trigger(call: Call) -> Response:
    run_id = await call.engine.schedules.trigger(call.params["schedule_id"])
    return JSON({"id": run_id}, status_code=201)


async def backfill(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"start", "end"})
    if body.get("start") is None or body.get("end") is None:
        raise InvalidArgumentError("'start' and 'end' (ISO 8601 or epoch seconds) are required")
    started = await call.engine.schedules.backfill(
        call.params["schedule_id"],
        filters.parse_time("start", body["start"]),
        filters.parse_time("end", body["end"]),
    )
    return JSON({"started": started})


async def delete(call: Call) -> Response:
    await call.engine.schedules.delete(call.params["schedule_id"])
    return JSON({"ok": True})


_ID = "/schedules/{schedule_id}"
_WHEN: dict[str, Any] = {"type": ["number", "string", "null"]}
_DURATION: dict[str, Any] = {"type": ["number", "string"]}
_EDIT_PROPS: dict[str, Any] = {
    "cron": {"type": "string"},
    "every": _DURATION,
    "timezone": {"type": "string"},
    "overlap": {"type": "string"},
    "catchup": {"type": "string"},
    "catchup_window": _DURATION,
    "jitter": _DURATION,
    "start_at": _WHEN,
    "end_at": _WHEN,
    "description": {"type": ["string", "null"]},
}

ENDPOINTS = (
    Endpoint(
        method="GET",
        path="/schedules",
        handler=list_schedules,
        scopes=("schedules:read",),
        summary="List schedules by id",
        query=(
            ("type", "string", "Only schedules of this workflow type."),
            ("paused", "string", "'true' or 'false'."),
        ),
        tag="schedules",
    ),
    Endpoint(
        method="POST",
        path="/schedules",
        handler=create_schedule,
        scopes=("schedules:write",),
        summary="Create a schedule (cron or every)",
        body={
            "type": "object",
            "required": ["id", "type"],
            "properties": {
                "id": {"type": "string"},
                "type": {"type": "string"},
                "args": {"type": "array"},
                "paused": {"type": "boolean"},
                **_EDIT_PROPS,
            },
        },
        responses={201: "Created"},
        tag="schedules",
    ),
    Endpoint(
        method="GET",
        path=_ID,
        handler=describe_schedule,
        scopes=("schedules:read",),
        summary="A schedule and its next fire times",
        query=(("preview", "integer", "How many next fire times, 1 to 100 (default 5)."),),
        tag="schedules",
    ),
    Endpoint(
        method="PATCH",
        path=_ID,
        handler=update_schedule,
        scopes=("schedules:write",),
        summary="Change a schedule's cadence or options",
        body={"type": "object", "properties": _EDIT_PROPS},
        tag="schedules",
    ),
    Endpoint(
        method="DELETE",
        path=_ID,
        handler=delete,
        scopes=("schedules:write",),
        summary="Delete a schedule (its runs are kept)",
        tag="schedules",
    ),
    Endpoint(
        method="POST",
        path=_ID + "/pause",
        handler=pause,
        scopes=("schedules:write",),
        summary="Pause a schedule",
        tag="schedules",
    ),
    Endpoint(
        method="POST",
        path=_ID + "/resume",
        handler=resume,
        scopes=("schedules:write",),
        summary="Resume a paused schedule",
        tag="schedules",
    ),
    Endpoint(
        method="POST",
        path=_ID + "/trigger",
        handler=trigger,
        scopes=("schedules:write",),
        summary="Start one run of a schedule now",
        responses={201: "Started"},
        tag="schedules",
    ),
    Endpoint(
        method="POST",
        path=_ID + "/backfill",
        handler=backfill,
        scopes=("schedules:write",),
        summary="Run a schedule's occurrences in a past window",
        body={
            "type": "object",
            "required": ["start", "end"],
            "properties": {"start": _WHEN, "end": _WHEN},
        },
        tag="schedules",
    ),
)
