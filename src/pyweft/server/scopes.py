"""The flat scope list (Weft's names). No scope implies another: ``workflows:admin``
does not grant ``workflows:read``."""

from __future__ import annotations

SCOPES: tuple[str, ...] = (
    "workflows:read",
    "workflows:write",
    "workflows:admin",
    "schedules:read",
    "schedules:write",
    "signals:write",
    "updates:write",
    "queries:read",
    "reviews:read",
    "reviews:write",
    "attributes:read",
    "attributes:write",
    "tags:write",
    "streams:read",
    "events:read",
    "budget:read",
    "budget:write",
    "storage:read",
    "storage:write",
    "storage:admin",
    "workers:write",
    "system:read",
    "system:admin",
)

SCOPE_SET = frozenset(SCOPES)


def is_scope(value: object) -> bool:
    return isinstance(value, str) and value in SCOPE_SET
