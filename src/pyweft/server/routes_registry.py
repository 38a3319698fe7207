"""The registry with schemas: every registered workflow type, its arguments and the
JSON Schemas of its input and output (what the dashboard's start form is built from),
and what a live run takes: its signals, updates and queries with their payload and
argument schemas (what the run page's message forms are built from)."""

from __future__ import annotations

from starlette.responses import Response

from pyweft.server.calls import JSON, Call, Endpoint


async def workflow_schemas(call: Call) -> Response:
    return JSON({"workflows": call.engine.workflow_schemas()})


async def run_handlers(call: Call) -> Response:
    return JSON(await call.engine.handlers(call.params["workflow_id"]))


ENDPOINTS = (
    Endpoint(
        method="GET",
        path="/registry/workflows",
        handler=workflow_schemas,
        # Either is enough: operators read the registry, and whoever may start runs
        # needs the input schemas to fill in the start form.
        scopes=("system:read", "workflows:write"),
        summary="Registered workflows with input and output JSON Schemas",
        tag="system",
    ),
    Endpoint(
        method="GET",
        path="/workflows/{workflow_id}/handlers",
        handler=run_handlers,
        # Whoever may read runs or send them messages may see what a run takes.
        scopes=("workflows:read", "queries:read", "signals:write", "updates:write"),
        summary="The signals, updates and queries a live run takes, with JSON Schemas",
        responses={
            200: "What the run takes now (nothing unless it is running)",
            409: "No engine answered for the running run in time (QueryUnavailableError)",
        },
        tag="messages",
    ),
)
