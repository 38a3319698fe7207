"""``/api/mcp``: the MCP tools over Streamable HTTP, behind the REST API's own auth.

Each HTTP request is authenticated exactly as a REST request (API key or JWT, the same
audit log, rate limit and cross-origin rule): no credential is a 401 with the server's
error shape before MCP sees the request. Each tool call then needs the scope its REST
route needs (``start_*`` ``workflows:write``, ``query_workflow`` ``queries:read``...);
a missing scope is a tool error with ``PermissionDeniedError``, audited like a 403.

The SDK's session manager runs stateless with JSON answers (no server-side sessions to
leak or pin to a process) and is started on the first request, so ``create_app`` does
not import ``mcp`` and the server works without the extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from typing import Any

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from pyweft import PermissionDeniedError, PyweftError, RateLimitedError
from pyweft.server import faults
from pyweft.server.cors import origin_allowed
from pyweft.server.mcp import MCP_EXTRA_HINT, mcp_available

PATH = "/api/mcp"
_FOUND = "pyweft.mcp.found"  # the ASGI scope key carrying the caller to the tool guard


class McpEndpoint:
    """The ASGI app mounted at ``/api/mcp`` (``state`` is the app's ``ServerState``)."""

    def __init__(self, state: Any) -> None:
        self._state = state
        self._manager: Any = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            await self._admit(request)
        except PyweftError as exc:
            headers = None
            if isinstance(exc, RateLimitedError):
                headers = {"Retry-After": str(max(1, round(exc.retry_after_s)))}
            await faults.error_response(exc, headers)(scope, receive, send)
            return
        if not mcp_available():
            response = faults.fault(
                501, "ConfigurationError", f"this server cannot speak MCP: {MCP_EXTRA_HINT}"
            )
            await response(scope, receive, send)
            return
        manager = await self._started()
        await manager.handle_request(scope, receive, send)

    async def _admit(self, request: Request) -> None:
        state = self._state
        if request.method != "GET" and not origin_allowed(
            request.headers.get("origin"), request.headers.get("host"), state.cors
        ):
            raise PermissionDeniedError(
                f"cross-origin {request.method} from {request.headers.get('origin')!r} is not "
                "allowed; add the origin to the server's CORS configuration"
            )
        found = await state.authenticator.principal(request)
        principal = found[0]
        if state.limiter is not None:
            who = (
                principal.subject
                if principal.authenticated
                else "ip:" + (request.client.host if request.client else "unknown")
            )
            wait = state.limiter.hit(who)
            if wait is not None:
                raise RateLimitedError(
                    f"rate limit of {state.limiter.max_requests} requests per "
                    f"{state.limiter.window_s:g}s reached; retry in {wait:.1f}s",
                    retry_after_s=wait,
                )
        # Any authenticated caller may speak MCP and list tools; each call checks its scope.
        state.authenticator.decide(found, (), request.method, PATH)
        request.scope[_FOUND] = found

    def _guard(self, ctx: Any, tool: str, scopes: tuple[str, ...]) -> None:
        request = getattr(ctx, "request", None)
        found = request.scope.get(_FOUND) if request is not None else None
        if found is None:  # not our HTTP request: refuse rather than guess
            raise PermissionDeniedError(f"tool {tool!r} called without an authenticated request")
        self._state.authenticator.decide(found, scopes, "MCP", f"{PATH}/tools/{tool}")

    async def _started(self) -> Any:
        if self._manager is not None and self._ready.is_set():
            return self._manager
        async with self._lock:
            if self._manager is None:
                # The SDK takes seconds to import on a busy machine: not on the loop.
                runtime = await asyncio.to_thread(
                    importlib.import_module, "pyweft.server.mcp.runtime"
                )
                from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

                self._manager = StreamableHTTPSessionManager(
                    app=runtime.build_server(self._state.engine, self._guard),
                    json_response=True,
                    stateless=True,
                    max_request_body_size=self._state.max_body_bytes,
                )
                self._task = asyncio.create_task(self._run(), name="pyweft-mcp")
            await self._ready.wait()
        return self._manager

    async def _run(self) -> None:
        try:
            async with self._manager.run():
                self._ready.set()
                await self._stop.wait()
        finally:
            self._ready.set()  # a manager that failed to start must not hang requests

    async def close(self) -> None:
        """Stop the session manager (the app's shutdown); a no-op if it never started."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
