"""The registry with schemas: every registered workflow type, its arguments and the
JSON Schemas of its input and output (what the dashboard's start form is built from)."""

from __future__ import annotations

from starlette.responses import Response

from pyweft.server.calls import JSON, Call, Endpoint


async def workflow_schemas(call: Call) -> Response:
    return JSON({"workflows": call.engine.workflow_schemas()})


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
)
