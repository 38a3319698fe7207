"""The MCP server object (from the official ``mcp`` SDK) for an engine's tools.

Imports ``mcp``: only :mod:`pyweft.server.mcp.http` (on the first request to
``/api/mcp``) and ``pyweft mcp`` load this module, so the rest of the server works
without the ``pyweft[mcp]`` extra.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext

import pyweft
from pyweft import Engine, PyweftError
from pyweft.server.disconnects import ClientGone, unless_disconnected
from pyweft.server.mcp import tools

# Decides whether the caller of one request may use a tool needing any of ``scopes``:
# returns nothing, or raises PermissionDeniedError / AuthenticationError.
Guard = Callable[[ServerRequestContext[Any, Any], str, tuple[str, ...]], None]

INSTRUCTIONS = (
    "Tools of a pyweft durable-execution engine. start_<type> starts a run of that "
    "workflow with named arguments (start_workflow takes positional ones); "
    "workflow_result waits for its result; list_workflows and describe_workflow read "
    "runs; signal_workflow, query_workflow, update_workflow and cancel_workflow act on one."
)


def _error(exc: PyweftError) -> types.CallToolResult:
    body = {"error": {"code": exc.code, "message": str(exc)}}
    return types.CallToolResult(
        content=[types.TextContent(text=f"{exc.code}: {exc}")],
        structured_content=body,
        is_error=True,
    )


def build_server(engine: Engine, guard: Guard | None = None) -> Server[Any]:
    """An MCP ``Server`` whose tools drive ``engine`` through its public API. ``guard``
    checks each tool call's scopes (``None``: every tool is allowed, as over stdio)."""
    cache: dict[tuple[tuple[str, str], ...], dict[str, tools.ToolSpec]] = {}

    def current() -> dict[str, tools.ToolSpec]:
        # Schemas are derived once per set of registered workflows (and versions).
        key = tuple(sorted(engine.registered_versions().items()))
        table = cache.get(key)
        if table is None:
            cache.clear()
            table = cache[key] = tools.all_tools(engine)
        return table

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=t.name, description=t.description, input_schema=t.input_schema)
                for t in current().values()
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        spec = current().get(params.name)
        if spec is None:
            return _error(
                pyweft.InvalidArgumentError(
                    f"no tool {params.name!r}; list_tools shows the tools this server has"
                )
            )
        try:
            if guard is not None:
                guard(ctx, spec.name, spec.scopes)
            running = tools.call(spec, engine, params.arguments)
            request = getattr(ctx, "request", None)  # the HTTP request, None over stdio
            if spec.held and request is not None:
                # The SDK has read the body and reads the channel no more: watch it.
                running = unless_disconnected(request.receive, running)
            value = await running
        except PyweftError as exc:
            return _error(exc)
        except ClientGone:  # the answer would go to a closed connection
            return types.CallToolResult(
                content=[types.TextContent(text="the client disconnected")], is_error=True
            )
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(value))],
            structured_content=value,
        )

    return Server(
        "pyweft",
        version=pyweft.__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
