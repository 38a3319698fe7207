"""Bulk operations over HTTP: ``POST /bulk/{cancel,signal,retry-failed,delete}``.

Each takes ``{"filter": {...}, "dry_run": true}`` first (the default), which answers
with the count, a sample and a ``confirmation_token``; the commit repeats the same
filter (and signal) with ``"dry_run": false`` and that token. The engine checks the
scope and the token and writes the audit record, naming the caller's subject.
Under ``/bulk`` rather than ``/workflows/bulk`` so no run id is shadowed.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from pyweft import InvalidArgumentError
from pyweft.server import filters
from pyweft.server.calls import JSON, Call, Endpoint, field_of, refuse_unknown

_PATH_OPERATIONS = {
    "cancel": "cancel",
    "signal": "signal",
    "retry-failed": "retry_failed",
    "delete": "delete",
}


async def bulk(call: Call) -> Response:
    operation = _PATH_OPERATIONS.get(call.params["operation"])
    if operation is None:
        raise InvalidArgumentError(
            f"unknown bulk operation {call.params['operation']!r}; use one of "
            f"{', '.join(_PATH_OPERATIONS)}"
        )
    body = call.body()
    refuse_unknown(body, {"filter", "dry_run", "confirmation_token", "signal"})
    flt = filters.from_body(field_of(body, "filter", dict, {}))
    dry_run = field_of(body, "dry_run", bool, True)
    signal: tuple[str, Any] | None = None
    if "signal" in body:
        raw = field_of(body, "signal", dict, {})
        refuse_unknown(raw, {"name", "payload"})
        signal = (field_of(raw, "name", str, ""), raw.get("payload"))
    if dry_run:
        preview = await call.engine.bulk_preview(operation, signal=signal, **flt)
        return JSON({"dry_run": True, **_public(preview)})
    token = field_of(body, "confirmation_token", str, "")
    result = await call.engine.bulk_commit(
        operation,
        confirmation_token=token,
        signal=signal,
        actor=call.principal.subject,
        **flt,
    )
    return JSON({"dry_run": False, **_public(result)})


async def audit(call: Call) -> Response:
    limit = call.query.get("limit")
    try:
        n = int(limit) if limit is not None else 50
    except ValueError:
        raise InvalidArgumentError(f"limit must be an integer, got {limit!r}") from None
    return JSON({"items": await call.engine.bulk_audit(limit=n)})


def _public(value: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(value)


_BODY = {
    "type": "object",
    "properties": {
        "filter": {"type": "object"},
        "dry_run": {"type": "boolean"},
        "confirmation_token": {"type": "string"},
        "signal": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "payload": {}},
        },
    },
}

ENDPOINTS = (
    Endpoint(
        method="POST",
        path="/bulk/{operation}",
        handler=bulk,
        scopes=("workflows:admin",),
        summary="Cancel, signal, retry failed or delete runs by filter (dry run, then confirm)",
        body=_BODY,
        tag="bulk",
    ),
    Endpoint(
        method="GET",
        path="/bulk/audit",
        handler=audit,
        scopes=("workflows:admin",),
        summary="The newest bulk operations committed, newest first",
        query=(("limit", "integer", "How many records (1-1000, default 50)"),),
        tag="bulk",
    ),
)
