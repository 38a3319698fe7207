"""List, aggregate and purge filters from a query string or a JSON body."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pyweft import InvalidArgumentError
from pyweft.client.wire import loads

TIME_FILTERS = ("created_after", "created_before", "updated_after", "updated_before")
BOUNDS = ("gt", "gte", "lt", "lte")
MAX_LIMIT = 1000


def parse_time(name: str, value: Any) -> datetime | float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    raise InvalidArgumentError(
        f"{name} must be an ISO 8601 time or seconds since the epoch, got {value!r}"
    )


def _attr_value(text: str) -> Any:
    """An attribute value from a query string: JSON when it parses (numbers, booleans),
    else the text itself."""
    try:
        return loads(text.encode())
    except Exception:
        return text


def from_query(query: Any, *, paging: bool) -> tuple[dict[str, Any], int, str | None]:
    """Engine filter keywords (plus limit and cursor) from query parameters."""
    filters: dict[str, Any] = {}
    attributes: dict[str, Any] = {}
    allowed = {"status", "type", "id_prefix", "parent_id", "tag", "failure_category", *TIME_FILTERS}
    if paging:
        allowed |= {"limit", "cursor"}
    else:
        allowed |= {"group_by"}
    for key in query:
        if key.startswith("attribute."):
            rest = key[len("attribute.") :]
            name, _, bound = rest.rpartition(".")
            if bound in BOUNDS and name:
                entry = attributes.setdefault(name, {})
                if not isinstance(entry, dict):
                    raise InvalidArgumentError(f"attribute {name!r} has both a value and bounds")
                entry[bound] = _attr_value(query[key])
            else:
                if rest in attributes:
                    raise InvalidArgumentError(f"attribute {rest!r} has both a value and bounds")
                attributes[rest] = _attr_value(query[key])
            continue
        if key not in allowed:
            raise InvalidArgumentError(
                f"unknown query parameter {key!r}; accepted: {', '.join(sorted(allowed))}, "
                "attribute.<name>[.gt|.gte|.lt|.lte]"
            )
    statuses = query.getlist("status")
    if statuses:
        filters["status"] = statuses if len(statuses) > 1 else statuses[0]
    if "type" in query:
        filters["workflow_type"] = query["type"]
    for name in ("id_prefix", "parent_id", "failure_category"):
        if name in query:
            filters[name] = query[name]
    tags = query.getlist("tag")
    if tags:
        filters["tags"] = tags
    for name in TIME_FILTERS:
        if name in query:
            filters[name] = parse_time(name, query[name])
    if attributes:
        filters["attributes"] = attributes
    limit = 100
    if paging and "limit" in query:
        text = query["limit"]
        if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
            raise InvalidArgumentError(f"limit must be an integer from 1 to {MAX_LIMIT}")
        limit = int(text)
    cursor = query.get("cursor") if paging else None
    return filters, limit, cursor


def from_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """Engine filter keywords from a JSON ``filter`` object (purge)."""
    names = {
        "status",
        "workflow_type",
        "id_prefix",
        "parent_id",
        "attributes",
        "tags",
        *TIME_FILTERS,
    }
    unknown = set(body) - names
    if unknown:
        raise InvalidArgumentError(
            f"unknown filter(s) {', '.join(sorted(unknown))}; accepted: {', '.join(sorted(names))}"
        )
    out = dict(body)
    for name in TIME_FILTERS:
        if name in out and out[name] is not None:
            out[name] = parse_time(name, out[name])
    return {k: v for k, v in out.items() if v is not None}
