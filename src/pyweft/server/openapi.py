"""The OpenAPI 3.1 document, built from the same endpoint table the router uses."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pyweft
from pyweft.server.calls import Endpoint

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "details": {"type": "object"},
            },
        }
    },
}

_ERRORS = {
    "400": "Invalid input (InvalidArgumentError, PayloadError...)",
    "401": "No valid credential (AuthenticationError)",
    "403": "Credential lacks the scope (PermissionDeniedError)",
    "404": "Unknown run, update, review or workflow type",
    "409": "Conflict with the run's state",
    "413": "Body over the size limit (RequestTooLargeError)",
    "429": "Rate limited (RateLimitedError, Retry-After)",
}


def _error_ref(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _operation(ep: Endpoint) -> dict[str, Any]:
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"{(\w+)}", ep.path)
    ]
    params += [
        {"name": name, "in": "query", "required": False, "schema": {"type": kind}, "description": d}
        for name, kind, d in ep.query
    ]
    responses: dict[str, Any] = {}
    for status, text in ep.responses.items():
        if status >= 400:
            responses[str(status)] = _error_ref(text)
        else:
            responses[str(status)] = {"description": text}
    for code, text in _ERRORS.items():
        if ep.public and code in ("401", "403", "429"):
            continue
        responses.setdefault(code, _error_ref(text))
    op: dict[str, Any] = {
        "operationId": ep.handler.__name__,
        "summary": ep.summary,
        "tags": [ep.tag],
        "parameters": params,
        "responses": responses,
        "x-pyweft-access": "public" if ep.public else {"anyOf": list(ep.scopes)},
    }
    if ep.public:
        op["security"] = []
    if ep.body is not None:
        op["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": ep.body}},
        }
    return op


def document(endpoints: Sequence[Endpoint], prefix: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for ep in endpoints:
        paths.setdefault(prefix + ep.path, {})[ep.method.lower()] = _operation(ep)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "pyweft",
            "version": pyweft.__version__,
            "description": "Durable execution over HTTP. Errors share one shape: "
            '{"error": {"code", "message", "details"}}, code being the pyweft error class.',
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR_SCHEMA},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            },
        },
        "security": [{"bearer": []}, {"apiKey": []}],
    }
