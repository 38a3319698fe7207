"""System endpoints (health, version, principal, lease, registry) and purge."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import time
from typing import Any

from starlette.responses import Response

import pyweft
from pyweft import InvalidArgumentError
from pyweft.client.wire import dumps
from pyweft.server import filters
from pyweft.server.calls import JSON, Call, Endpoint, field_of, refuse_unknown

TERMINAL = ("completed", "failed", "cancelled", "timed_out")
CONFIRM_TTL_S = 600.0
SAMPLE_SIZE = 10


async def health(call: Call) -> Response:
    return JSON({"status": "ok"})


async def version(call: Call) -> Response:
    return JSON({"version": pyweft.__version__, "api": "v1"})


async def principal(call: Call) -> Response:
    p = call.principal
    return JSON(
        {
            "subject": p.subject,
            "method": p.method if p.authenticated or p.method == "open" else "unauthenticated",
            "scopes": sorted(p.scopes),
        }
    )


async def lease(call: Call) -> Response:
    h = call.engine.lease_health()
    return JSON(dataclasses.asdict(h))


async def registry(call: Call) -> Response:
    versions = call.engine.registered_versions()
    return JSON(
        {"workflows": [{"type": t, "version": versions.get(t)} for t in call.engine.workflow_types]}
    )


def _token(secret: bytes, flt: dict[str, Any], expires: int) -> str:
    msg = dumps({"filter": flt, "expires": expires})
    return f"{expires}.{hmac.new(secret, msg, hashlib.sha256).hexdigest()}"


def _check_token(secret: bytes, flt: dict[str, Any], token: str) -> None:
    expires_text, _, _ = token.partition(".")
    if not expires_text.isdigit():
        raise InvalidArgumentError("confirmation token is malformed; run a dry run first")
    expires = int(expires_text)
    if not hmac.compare_digest(_token(secret, flt, expires), token):
        raise InvalidArgumentError(
            "confirmation token does not match this filter; repeat the dry run's exact filter"
        )
    if time.time() > expires:
        raise InvalidArgumentError("confirmation token expired; run the dry run again")


async def purge(call: Call) -> Response:
    """Dry run (default): count and sample the finished runs the filter selects, and return
    a confirmation token bound to that filter. Commit: the same filter plus the token."""
    body = call.body()
    refuse_unknown(body, {"filter", "dry_run", "confirmation"})
    raw_filter = field_of(body, "filter", dict, {})
    flt = filters.from_body(raw_filter)
    dry_run = field_of(body, "dry_run", bool, True)
    secret: bytes = call.state.secret
    if dry_run:
        statuses = flt.get("status", TERMINAL)
        if isinstance(statuses, str):
            statuses = [statuses]
        finished = [s for s in statuses if s in TERMINAL]
        count, cursor = 0, None
        sample: list[str] = []
        if finished:
            while True:
                page = await call.engine.list(
                    **{**flt, "status": finished}, limit=1000, cursor=cursor
                )
                count += len(page.items)
                sample.extend(i.id for i in page.items[: SAMPLE_SIZE - len(sample)])
                cursor = page.next_cursor
                if cursor is None:
                    break
        expires = int(time.time() + CONFIRM_TTL_S)
        return JSON(
            {
                "dry_run": True,
                "count": count,
                "sample": sample,
                "confirmation": _token(secret, raw_filter, expires),
            }
        )
    token = field_of(body, "confirmation", str, None)
    if token is None:
        raise InvalidArgumentError("dry_run=false needs the dry run's 'confirmation' token")
    _check_token(secret, raw_filter, token)
    purged = await call.engine.purge(**flt)
    from pyweft.server.auth import audit_log

    audit_log.info(
        "purge by subject=%s filter=%s purged=%d", call.principal.subject, raw_filter, purged
    )
    return JSON({"dry_run": False, "purged": purged})


ENDPOINTS = (
    Endpoint(
        method="GET", path="/health", handler=health, public=True, summary="Liveness", tag="system"
    ),
    Endpoint(
        method="GET",
        path="/version",
        handler=version,
        public=True,
        summary="Server version",
        tag="system",
    ),
    Endpoint(
        method="GET",
        path="/principal",
        handler=principal,
        public=True,
        summary="Who the server takes the caller for",
        tag="system",
    ),
    Endpoint(
        method="GET",
        path="/system/lease",
        handler=lease,
        scopes=("system:read",),
        summary="The store lease as this engine sees it",
        tag="system",
    ),
    Endpoint(
        method="GET",
        path="/registry",
        handler=registry,
        scopes=("system:read",),
        summary="Registered workflow types and versions",
        tag="system",
    ),
    Endpoint(
        method="POST",
        path="/workflows/purge",
        handler=purge,
        scopes=("workflows:admin",),
        summary="Delete finished runs (dry run first, then confirm)",
        body={
            "type": "object",
            "properties": {
                "filter": {"type": "object"},
                "dry_run": {"type": "boolean"},
                "confirmation": {"type": "string"},
            },
        },
    ),
)
