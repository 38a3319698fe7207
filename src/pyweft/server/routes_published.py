"""REST endpoints for what runs publish (events, streams) and for the calls that create
runs on the caller's behalf: update-with-start and debounce.

``GET /workflows/{id}/published/{key}?wait=`` answers a run's published event;
``GET /workflows/{id}/streams/{key}/sse`` follows a run's stream as server-sent events
(``event: chunk`` with the chunk's offset as ``id:``, then ``event: end``; a client
resumes with ``Last-Event-ID`` or ``?from_offset=``). ``POST
/workflows/update-with-start`` and ``POST /workflows/debounce`` mirror the engine
methods of the same names. Shapes follow decision 0023.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response, StreamingResponse

from pyweft import InvalidArgumentError
from pyweft.client.wire import dumps
from pyweft.server.calls import JSON, Call, Endpoint, field_of, refuse_unknown

MAX_WAIT_S = 60.0
_DONE = object()


def _seconds(text: str, name: str, default: float) -> float:
    try:
        value = float(text) if text else default
    except ValueError:
        raise InvalidArgumentError(f"{name} must be a number of seconds") from None
    if not 0 <= value <= MAX_WAIT_S:
        raise InvalidArgumentError(f"{name} must be from 0 to {MAX_WAIT_S:g} seconds")
    return value


async def published_event(call: Call) -> Response:
    unknown = set(call.query) - {"wait"}
    if unknown:
        raise InvalidArgumentError(f"unknown query parameter(s) {', '.join(sorted(unknown))}")
    wait = _seconds(call.query.get("wait", ""), "wait", 0.0)
    value = await call.while_connected(
        call.engine.get_event(call.params["workflow_id"], call.params["key"], timeout=wait)
    )
    return JSON({"value": value})


def _from_offset(call: Call) -> int:
    unknown = set(call.query) - {"from_offset"}
    if unknown:
        raise InvalidArgumentError(f"unknown query parameter(s) {', '.join(sorted(unknown))}")
    last = call.request.headers.get("last-event-id")
    text = call.query.get("from_offset")
    try:
        if last:
            return int(last) + 1
        return int(text) if text else 0
    except ValueError:
        raise InvalidArgumentError(
            "from_offset (and Last-Event-ID) must be a whole number of chunks"
        ) from None


async def stream(call: Call) -> Response:
    workflow_id, key = call.params["workflow_id"], call.params["key"]
    offset = _from_offset(call)
    await call.engine.describe(workflow_id)  # 404 now, not a broken stream later
    chunks = call.engine.read_stream(workflow_id, key, from_offset=offset)  # 400 on bad input
    ping_s: float = call.state.ping_s
    return StreamingResponse(
        _sse(chunks, offset, ping_s),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _sse(chunks: AsyncIterator[Any], offset: int, ping_s: float) -> AsyncIterator[bytes]:
    # A pump task reads the stream, so waiting for a chunk can time out into a ping
    # without cancelling the stream's own iterator.
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=256)

    async def pump() -> None:
        try:
            async for chunk in chunks:
                await queue.put((chunk,))
            await queue.put(_DONE)
        except Exception as exc:  # e.g. the run was purged while followed
            await queue.put(exc)

    task = asyncio.get_running_loop().create_task(pump())
    try:
        yield b": connected\n\n"
        while True:
            try:
                async with asyncio.timeout(ping_s):
                    item = await queue.get()
            except TimeoutError:
                yield b": ping\n\n"
                continue
            if item is _DONE:
                yield b"event: end\ndata: {}\n\n"
                return
            if isinstance(item, Exception):
                # Only pyweft's own errors are named; anything else is masked (0023).
                known = getattr(item, "code", None) is not None
                error: dict[str, Any] = {
                    "code": item.code if known else "ServerError",  # type: ignore[attr-defined]
                    "message": str(item) if known else "internal server error",
                    "details": {},
                }
                yield b"event: error\ndata: " + dumps(error) + b"\n\n"
                return
            yield b"event: chunk\nid: %d\ndata: " % offset + dumps(item[0]) + b"\n\n"
            offset += 1
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task


async def update_with_start(call: Call) -> Response:
    body = call.body()
    allowed = {"type", "args", "id", "update", "payload", "timeout", "idempotency_key"}
    refuse_unknown(body, allowed | {"execution_timeout", "tags"})
    wf_type = field_of(body, "type", str, None)
    name = field_of(body, "update", str, None)
    run_id = field_of(body, "id", str, None)
    if wf_type is None or name is None or run_id is None:
        raise InvalidArgumentError("'type', 'id' and 'update' (the update name) are required")
    timeout = field_of(body, "timeout", (int, float), 5.0)
    if not 0 < timeout <= MAX_WAIT_S:
        raise InvalidArgumentError(f"timeout must be more than 0 and at most {MAX_WAIT_S:g}s")
    handle, answer = await call.engine.update_with_start(
        wf_type,
        *field_of(body, "args", list, []),
        update=(name, body["payload"]) if "payload" in body else name,
        id=run_id,
        timeout=timeout,
        idempotency_key=field_of(body, "idempotency_key", str, None),
        execution_timeout=field_of(body, "execution_timeout", (int, float, str), None),
        tags=field_of(body, "tags", list, []),
    )
    return JSON({"id": handle.id, "result": answer})


async def debounce(call: Call) -> Response:
    body = call.body()
    refuse_unknown(body, {"key", "type", "args", "period", "max_wait"})
    key = field_of(body, "key", str, None)
    wf_type = field_of(body, "type", str, None)
    period = field_of(body, "period", (int, float, str), None)
    if key is None or wf_type is None or period is None:
        raise InvalidArgumentError("'key', 'type' and 'period' are required")
    handle = await call.engine.debounce(
        key,
        wf_type,
        *field_of(body, "args", list, []),
        period=period,
        max_wait=field_of(body, "max_wait", (int, float, str), None),
    )
    return JSON({"id": handle.id})


_ID = "/workflows/{workflow_id}"
_DURATION = {"type": ["number", "string"]}

ENDPOINTS = (
    Endpoint(
        method="GET",
        path=_ID + "/published/{key}",
        handler=published_event,
        scopes=("events:read",),
        summary="A run's published event (ctx.set_event), waiting up to ?wait= seconds",
        query=(("wait", "number", "Seconds to wait for a first value, 0 to 60 (default 0)."),),
        responses={200: "{'value': the latest value, or null}"},
        tag="events",
    ),
    Endpoint(
        method="GET",
        path=_ID + "/streams/{key}/sse",
        handler=stream,
        scopes=("streams:read",),
        summary="Follow a run's stream as server-sent events until it is closed or the run ends",
        query=(("from_offset", "integer", "First chunk to send (or send Last-Event-ID)."),),
        responses={200: "text/event-stream of chunks"},
        tag="events",
    ),
    Endpoint(
        method="POST",
        path="/workflows/update-with-start",
        handler=update_with_start,
        scopes=("workflows:write",),
        summary="Start a run if absent and deliver an update; answers with the update's result",
        body={
            "type": "object",
            "required": ["type", "id", "update"],
            "properties": {
                "type": {"type": "string"},
                "args": {"type": "array"},
                "id": {"type": "string"},
                "update": {"type": "string"},
                "payload": {},
                "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_WAIT_S},
                "idempotency_key": {"type": "string"},
                "execution_timeout": _DURATION,
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        },
        responses={200: "Answered", 408: "No answer yet (details.update_id)"},
    ),
    Endpoint(
        method="POST",
        path="/workflows/debounce",
        handler=debounce,
        scopes=("workflows:write",),
        summary="Collapse calls with one key within a period into one run",
        body={
            "type": "object",
            "required": ["key", "type", "period"],
            "properties": {
                "key": {"type": "string"},
                "type": {"type": "string"},
                "args": {"type": "array"},
                "period": _DURATION,
                "max_wait": _DURATION,
            },
        },
    ),
)
