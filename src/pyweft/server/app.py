"""``create_app(engine, auth=...)``: the ASGI application serving the REST API, event
feeds and OpenAPI document for one engine. Built only on the public ``Engine`` API."""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from pyweft import (
    ConfigurationError,
    Engine,
    PermissionDeniedError,
    PyweftError,
    RateLimitedError,
)
from pyweft.server import (
    faults,
    routes_activities,
    routes_bulk,
    routes_messages,
    routes_published,
    routes_queues,
    routes_registry,
    routes_schedules,
    routes_streams,
    routes_system,
    routes_workflows,
)
from pyweft.server.auth import Authenticator, RateLimiter, ServerAuth, monotonic
from pyweft.server.calls import JSON, Call, Endpoint, read_json
from pyweft.server.cors import CorsConfig, origin_allowed
from pyweft.server.disconnects import CLIENT_GONE_STATUS, ClientGone
from pyweft.server.feeds import EventJournal, StreamSlots
from pyweft.server.keys import ApiKeyStore
from pyweft.server.mcp.http import PATH as MCP_PATH
from pyweft.server.mcp.http import McpEndpoint
from pyweft.server.metrics import ServerMetrics
from pyweft.server.routes_tasks_ws import TaskStreams
from pyweft.server.task_hub import TaskStreamOptions

log = logging.getLogger("pyweft.server")

API_PREFIX = "/api/v1"
DEFAULT_MAX_BODY = 1024 * 1024

ENDPOINTS: tuple[Endpoint, ...] = (
    *routes_system.ENDPOINTS,
    *routes_workflows.ENDPOINTS,
    *routes_messages.ENDPOINTS,
    *routes_streams.ENDPOINTS,
    *routes_bulk.ENDPOINTS,
    *routes_published.ENDPOINTS,
    *routes_schedules.ENDPOINTS,
    *routes_registry.ENDPOINTS,
    *routes_activities.ENDPOINTS,
    *routes_queues.ENDPOINTS,
)
WS_SCOPES = ("events:read",)


@dataclass(frozen=True, kw_only=True)
class RateLimit:
    """At most ``max_requests`` per ``window_s`` seconds per principal (or client address)."""

    max_requests: int
    window_s: float = 60.0


@dataclass(kw_only=True)
class ServerState:
    engine: Engine
    authenticator: Authenticator
    limiter: RateLimiter | None
    journal: EventJournal
    max_body_bytes: int
    ping_s: float
    secret: bytes
    metrics: ServerMetrics
    cors: CorsConfig | None
    slots: StreamSlots


def _client_of(conn: Request | WebSocket) -> str:
    return "ip:" + (conn.client.host if conn.client else "unknown")


def _endpoint_route(ep: Endpoint, state: ServerState) -> Route:
    async def handle(request: Request) -> Response:
        started = time.perf_counter()
        status = 500
        try:
            response = await answer(request)
            status = response.status_code
            return response
        except PyweftError as exc:
            status = faults.status_of(exc)
            raise
        finally:
            state.metrics.observe(ep.path, ep.method, status, time.perf_counter() - started)

    async def answer(request: Request) -> Response:
        origin = request.headers.get("origin") if request.method != "GET" else None
        if origin is not None and not origin_allowed(
            origin, request.headers.get("host"), state.cors
        ):
            raise PermissionDeniedError(
                f"cross-origin {request.method} from {origin!r} is not "
                "allowed; add the origin to the server's CORS configuration"
            )
        found = await state.authenticator.principal(request)
        if not ep.public:
            principal = found[0]
            if state.limiter is not None:
                who = principal.subject if principal.authenticated else _client_of(request)
                wait = state.limiter.hit(who)
                if wait is not None:
                    raise RateLimitedError(
                        f"rate limit of {state.limiter.max_requests} requests per "
                        f"{state.limiter.window_s:g}s reached; retry in {wait:.1f}s",
                        retry_after_s=wait,
                    )
            if state.authenticator.enabled:  # an open server decides nothing: skip the URL
                state.authenticator.decide(found, ep.scopes, request.method, request.url.path)
        body = await read_json(request, state.max_body_bytes) if ep.body is not None else None
        call = Call(
            request=request, engine=state.engine, principal=found[0], state=state, _body=body
        )
        try:
            return await ep.handler(call)
        except PyweftError:
            raise
        except ClientGone:  # a long wait whose client left: no one reads this
            return Response(status_code=CLIENT_GONE_STATUS)
        except Exception as exc:  # answered here: Starlette's last-resort handler re-raises
            return await faults.on_unexpected(request, exc)

    return Route(API_PREFIX + ep.path, handle, methods=[ep.method], name=ep.handler.__name__)


def _ws_route(path: str, state: ServerState, per_run: bool) -> WebSocketRoute:
    async def handle(websocket: WebSocket) -> None:
        if not origin_allowed(
            websocket.headers.get("origin"), websocket.headers.get("host"), state.cors
        ):
            await websocket.close(code=1008, reason="PermissionDeniedError")
            return
        try:
            found = await state.authenticator.principal(websocket)
            state.authenticator.decide(found, WS_SCOPES, "GET", websocket.url.path)
        except PyweftError as exc:
            await websocket.close(code=1008, reason=exc.code)
            return
        workflow_id = websocket.path_params.get("workflow_id") if per_run else None
        await routes_streams.watch(websocket, state, workflow_id)

    return WebSocketRoute(API_PREFIX + path, handle)


def _sorted(endpoints: Sequence[Endpoint]) -> list[Endpoint]:
    # Fixed segments before parameters, so /workflows/aggregate is not read as an id.
    return sorted(endpoints, key=lambda ep: ["{" in part for part in ep.path.split("/")])


def create_app(
    engine: Engine,
    *,
    auth: ServerAuth | None = None,
    cors: CorsConfig | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY,
    rate_limit: RateLimit | None = None,
    ping_s: float = 15.0,
    replay_capacity: int = 10_000,
    max_streams_per_run: int = 100,
    clock: Callable[[], float] = monotonic,
    dashboard: bool = False,
    task_streams: TaskStreamOptions | None = None,
) -> Starlette:
    """The ASGI app for ``engine``: REST under ``/api/v1``, SSE and WebSocket feeds, and
    ``/openapi.json``. Mount it in your own Starlette or FastAPI app, or run it with
    ``pyweft serve``. The app does not open or close ``engine``; you do.

    ``auth=None`` serves everyone with every scope (fine on loopback; ``pyweft serve``
    refuses other addresses without ``--allow-unauthenticated``). ``ServerAuth()``
    requires an API key from ``pyweft keys create`` on every non-public route.

    ``dashboard=True`` also serves the web dashboard at ``/`` (static files from the
    wheel; the page itself calls the API above with the user's key, so it needs no
    route of its own). ``pyweft serve`` turns it on unless ``--no-dashboard``.

    ``task_streams`` tunes the remote worker WebSocket (``/api/v1/tasks/{queue}/stream``,
    docs/guides/remote-workers.md): reconnect grace, heartbeat interval, shutdown wait.
    """
    if max_body_bytes < 1:
        raise ConfigurationError("max_body_bytes must be at least 1")
    if ping_s <= 0:
        raise ConfigurationError("ping_s must be positive")
    if max_streams_per_run < 1:
        raise ConfigurationError("max_streams_per_run must be at least 1")
    if cors is not None:
        cors.validate()
    state = ServerState(
        engine=engine,
        authenticator=Authenticator(auth, ApiKeyStore(engine.storage)),
        limiter=(
            RateLimiter(rate_limit.max_requests, rate_limit.window_s, clock)
            if rate_limit is not None
            else None
        ),
        journal=EventJournal(engine, replay_capacity),
        max_body_bytes=max_body_bytes,
        ping_s=ping_s,
        secret=secrets.token_bytes(32),
        metrics=ServerMetrics(engine),
        cors=cors,
        slots=StreamSlots(max_streams_per_run),
    )
    routes: list[BaseRoute] = [_endpoint_route(ep, state) for ep in _sorted(ENDPOINTS)]
    routes.append(_ws_route("/events/ws", state, per_run=False))
    routes.append(_ws_route("/workflows/{workflow_id}/watch", state, per_run=True))
    tasks = TaskStreams(state, task_streams)  # remote workers (routes_tasks_ws.py)
    routes.extend(tasks.routes(API_PREFIX))

    async def openapi(request: Request) -> Response:
        from pyweft.server.openapi import document

        return JSON(document(ENDPOINTS, API_PREFIX))

    routes.append(Route("/openapi.json", openapi, methods=["GET"]))

    async def metrics(request: Request) -> Response:
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")

    routes.append(Route(API_PREFIX + "/metrics", metrics, methods=["GET"]))
    mcp = McpEndpoint(state)  # MCP tools behind the same auth; imports `mcp` on first use
    routes.append(Route(MCP_PATH, mcp, methods=["GET", "POST", "DELETE"]))
    if dashboard:
        from pyweft.dashboard import dashboard_routes

        routes.extend(dashboard_routes())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await state.journal.start()
        try:
            yield
        finally:
            await tasks.close()
            await mcp.close()
            await state.journal.close()

    middleware: list[Middleware] = []
    if cors is not None:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors.allowed_origins),
                allow_methods=["GET", "POST", "PATCH", "DELETE"],
                allow_headers=list(cors.allowed_headers),
                allow_credentials=cors.allow_credentials,
                max_age=cors.max_age_s,
            )
        )
    handlers: dict[Any, Any] = {
        PyweftError: faults.on_pyweft_error,
        HTTPException: faults.on_http_exception,
        Exception: faults.on_unexpected,
    }
    app = Starlette(
        routes=routes, middleware=middleware, exception_handlers=handlers, lifespan=lifespan
    )
    app.state.pyweft = state
    app.state.pyweft_tasks = tasks.hub
    return app
