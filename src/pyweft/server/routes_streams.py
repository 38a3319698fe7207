"""Server-sent events and WebSocket watches over the event journal (see ``feeds``).

SSE: ``GET /events/sse`` (every run; ``?workflow_id=``, ``?type=``, ``?kind=``
repeatable) and ``GET /workflows/{id}/events/sse`` (one run: starts with its events the
journal still holds, ends after its terminal event). Each event's ``id:`` is its
cursor; a reconnecting client sends it back as ``Last-Event-ID`` (or ``?cursor=``).
A ``: ping`` comment is sent every ``ping_s`` seconds of silence. WebSocket: ``/events/ws`` and
``/workflows/{id}/watch`` send the same items as JSON text frames
(``{"type": "event", "cursor", "event"}``, ``{"type": "gap"}``, ``{"type": "ping"}``)
and take the cursor as ``?cursor=``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from pyweft import InvalidArgumentError, PyweftError, RateLimitedError
from pyweft.client.wire import dumps
from pyweft.server.calls import Call, Endpoint
from pyweft.server.feeds import FeedFilter, FeedItem, StreamSlots

TERMINAL = frozenset({"completed", "failed", "cancelled", "timed_out"})


def feed_filter(query: Any, workflow_id: str | None) -> FeedFilter:
    unknown = set(query) - {"workflow_id", "type", "kind", "cursor"}
    if unknown:
        raise InvalidArgumentError(
            f"unknown query parameter(s) {', '.join(sorted(unknown))}; "
            "accepted: workflow_id, type, kind (repeatable), cursor"
        )
    return FeedFilter(
        workflow_id=workflow_id or query.get("workflow_id"),
        workflow_type=query.get("type"),
        kinds=frozenset(query.getlist("kind")),
    )


def _sse(item: FeedItem) -> bytes:
    if item.sse is not None:
        return item.sse
    if item.kind == "ping":
        return b": ping\n\n"
    lines = [f"event: {item.kind}"]
    if item.cursor is not None:
        lines.append(f"id: {item.cursor}")
    lines.append("data: " + dumps(item.data).decode())
    return ("\n".join(lines) + "\n\n").encode()


async def _sse_response(call: Call, workflow_id: str | None) -> Response:
    flt = feed_filter(call.query, workflow_id)
    cursor = call.request.headers.get("last-event-id") or call.query.get("cursor")
    journal = call.state.journal
    journal.parse_cursor(cursor)  # a bad cursor is a 400 now, not a broken stream later
    # Pin "from now on" before answering, so nothing emitted after the client sees the
    # response's first bytes can slip past the feed.
    # A run's own feed first replays what the journal still holds for it.
    cursor = cursor or (journal.cursor(0) if workflow_id is not None else journal.now())
    if workflow_id is not None:
        await call.engine.describe(workflow_id)  # 404 for an unknown run
    until = (lambda e: e.kind in TERMINAL) if workflow_id is not None else None

    async def body() -> AsyncIterator[bytes]:
        yield b": connected\n\n"
        async for chunk in journal.follow_sse(
            flt, cursor, ping_s=call.state.ping_s, until=until, encode=_sse
        ):
            yield chunk

    slots: StreamSlots = call.state.slots
    if not slots.take(flt.workflow_id):
        raise RateLimitedError(
            f"run {flt.workflow_id!r} already has {slots.per_run} open feeds; close one",
            retry_after_s=1.0,
        )
    return _Feed(body(), release=lambda: slots.release(flt.workflow_id))


class _Feed(StreamingResponse):
    """An SSE response that gives its stream slot back however the stream ends."""

    def __init__(self, body: AsyncIterator[bytes], release: Callable[[], None]) -> None:
        super().__init__(
            body,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


async def fleet_sse(call: Call) -> Response:
    return await _sse_response(call, None)


async def run_sse(call: Call) -> Response:
    return await _sse_response(call, call.params["workflow_id"])


async def watch(websocket: WebSocket, state: Any, workflow_id: str | None) -> None:
    """A WebSocket feed; authorisation happened on the upgrade request."""
    try:
        flt = feed_filter(websocket.query_params, workflow_id)
        cursor = websocket.query_params.get("cursor")
        state.journal.parse_cursor(cursor)
        if not cursor:
            cursor = state.journal.cursor(0) if workflow_id is not None else state.journal.now()
    except PyweftError as exc:
        await websocket.close(code=1008, reason=str(exc)[:120])
        return
    if not state.slots.take(flt.workflow_id):
        await websocket.close(code=1008, reason="too many feeds for this run")
        return
    try:
        await _watch(websocket, state, flt, cursor, workflow_id)
    finally:
        state.slots.release(flt.workflow_id)


async def _watch(
    websocket: WebSocket, state: Any, flt: FeedFilter, cursor: str, workflow_id: str | None
) -> None:
    await websocket.accept()
    until = (lambda e: e.kind in TERMINAL) if workflow_id is not None else None
    try:
        async for item in state.journal.follow(flt, cursor, ping_s=state.ping_s, until=until):
            frame: dict[str, Any] = {"type": item.kind}
            if item.cursor is not None:
                frame["cursor"] = item.cursor
            if item.kind == "event":
                frame["event"] = item.data
            elif item.data is not None:
                frame["data"] = item.data
            await websocket.send_text(json.dumps(frame, default=str))
        await websocket.close(code=1000)
    except WebSocketDisconnect:
        return


_SSE = {200: "text/event-stream of events"}

ENDPOINTS = (
    Endpoint(
        method="GET",
        path="/events/sse",
        handler=fleet_sse,
        scopes=("events:read",),
        summary="Every run's events as server-sent events",
        query=(
            ("workflow_id", "string", "Only this run."),
            ("type", "string", "Only this workflow type."),
            ("kind", "string", "Only this event kind; repeat for several."),
            ("cursor", "string", "Resume after this event id (or send Last-Event-ID)."),
        ),
        responses=_SSE,
        tag="events",
    ),
    Endpoint(
        method="GET",
        path="/workflows/{workflow_id}/events/sse",
        handler=run_sse,
        scopes=("events:read",),
        summary="One run's events as server-sent events, until it ends",
        query=(
            ("kind", "string", "Only this event kind; repeat for several."),
            ("cursor", "string", "Resume after this event id (or send Last-Event-ID)."),
        ),
        responses=_SSE,
        tag="events",
    ),
)
