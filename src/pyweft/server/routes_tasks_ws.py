"""``WS /api/v1/tasks/{queue}/stream``: activity task queues served to remote workers.

A worker in any language opens the socket with an API key (scope
``workers:write``; ``Authorization: Bearer`` or ``X-API-Key`` on the upgrade
request, never inside frames), registers, and gets ``task`` frames for attempts
the server claims from the store in its name (see :mod:`.task_hub`,
:mod:`.task_session`). Every frame is checked against :mod:`pyweft.worker.protocol`
before it is acted on: a bad one gets a ``protocolError`` and the socket is
closed (1002, or 1009 for an oversized frame) with nothing stored.
``GET /api/v1/tasks/protocol`` (public) serves the protocol's JSON Schema.
"""

from __future__ import annotations

import contextlib
import logging
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from pyweft import PermissionDeniedError, PyweftError
from pyweft.engine.tasks.records import check_queue
from pyweft.server import faults
from pyweft.server.cors import origin_allowed
from pyweft.server.task_hub import TaskHub, TaskStreamOptions
from pyweft.server.task_session import Session
from pyweft.worker import protocol as p

log = logging.getLogger("pyweft.server.tasks")

SCOPES = ("workers:write",)
STREAM_PATH = "/tasks/{queue}/stream"
PROTOCOL_PATH = "/tasks/protocol"


class TaskStreams:
    """The task stream routes of one app, and the hub behind them."""

    def __init__(self, state: Any, options: TaskStreamOptions | None = None) -> None:
        self.state = state
        self.hub = TaskHub(state.engine, options or TaskStreamOptions())
        self._schema = shipped_schema_text().encode()

    def routes(self, prefix: str) -> list[BaseRoute]:
        return [
            Route(prefix + PROTOCOL_PATH, self._protocol, methods=["GET"]),
            WebSocketRoute(prefix + STREAM_PATH, self._stream),
        ]

    async def close(self) -> None:
        await self.hub.close()

    async def _protocol(self, request: Request) -> Response:
        return Response(self._schema, media_type="application/schema+json")

    async def _deny(self, ws: WebSocket, exc: PyweftError) -> None:
        try:
            await ws.send_denial_response(faults.error_response(exc))
        except RuntimeError:  # the ASGI server cannot answer an upgrade with HTTP
            await ws.close(code=1008, reason=exc.code)

    async def _stream(self, ws: WebSocket) -> None:
        state = self.state
        if not origin_allowed(ws.headers.get("origin"), ws.headers.get("host"), state.cors):
            await self._deny(
                ws,
                PermissionDeniedError(
                    f"a WebSocket from origin {ws.headers.get('origin')!r} is not allowed"
                ),
            )
            return
        try:
            found = await state.authenticator.principal(ws)
            principal = state.authenticator.decide(found, SCOPES, "GET", ws.url.path)
            queue = check_queue(ws.path_params.get("queue"))
        except PyweftError as exc:
            await self._deny(ws, exc)
            return
        await ws.accept()
        peer = f"{ws.client.host}:{ws.client.port}" if ws.client else None
        holder: list[Session] = []
        try:
            await self._converse(ws, principal.subject, queue, peer, holder)
        except WebSocketDisconnect:
            pass
        except Exception:
            # A store failure while acting on a frame: nothing half-done is acknowledged.
            # Closing (1011) makes the worker reconnect within the grace and send again
            # what was not acknowledged.
            log.exception("task stream of %s failed; closing it", holder or peer)
            with contextlib.suppress(Exception):
                await ws.close(code=1011, reason="server error; reconnect")
        finally:
            if holder:
                await self.hub.detach(holder[0], ws)

    async def _converse(
        self, ws: WebSocket, subject: str, queue: str, peer: str | None, holder: list[Session]
    ) -> None:
        """Read frames until the socket closes; the session it registers goes in
        ``holder`` (so that it is detached however the conversation ends)."""
        session: Session | None = None
        limit = self.hub.options.max_frame_bytes
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                await _violation(ws, "invalid_message", "frames are JSON text, not binary")
                return
            if len(text) > limit:  # characters, so at most 4x the bytes; parsing waits
                await _violation(
                    ws,
                    "frame_too_large",
                    f"a frame of {len(text)} characters exceeds the {limit}-byte limit",
                    close=1009,
                )
                return
            try:
                frame = p.decode_worker_frame(text)
            except p.FrameError as exc:
                if session is None and exc.kind == "register":
                    await self.hub.refuse(ws, "invalid_registration", exc.message)
                else:
                    await _violation(ws, exc.code, exc.message)
                return
            if session is None:
                if not isinstance(frame, p.Register):
                    await _violation(
                        ws,
                        "registration_required",
                        f"the first frame must be register, got {type_of(frame)}",
                    )
                    return
                session = await self.hub.register(
                    ws, frame, subject=subject, path_queue=queue, peer=peer
                )
                if session is None:
                    return
                holder.append(session)
                continue
            if isinstance(frame, p.Register):
                await _violation(ws, "already_registered", "this socket is already registered")
                return
            if session.ws is not ws:  # replaced by a reconnect: this socket is done
                return
            if isinstance(frame, p.Heartbeat):
                await session.on_heartbeat()
            elif isinstance(frame, p.TaskResult):
                await session.on_result(frame)
            else:
                await session.on_drain()


def type_of(frame: Any) -> str:
    return str(type(frame).__struct_config__.tag)


async def _violation(ws: WebSocket, code: Any, message: str, *, close: int = 1002) -> None:
    log.info("task stream protocol error (%s): %s", code, message)
    try:
        await ws.send_text(p.encode(p.ProtocolError(code=code, message=message)))
        await ws.close(code=close, reason=code)
    except Exception:  # the socket is already gone
        return


def shipped_schema_text() -> str:
    """The protocol's JSON Schema as shipped in the package (a test pins it to
    :func:`pyweft.worker.protocol.protocol_schema`)."""
    return resources.files("pyweft.server").joinpath("schemas/task-protocol.json").read_text()
