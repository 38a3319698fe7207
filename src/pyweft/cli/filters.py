"""The run filters ``workflows list`` and ``workflows count`` share, parsed from their options.

Text the CLI itself must interpret (an ``--attr`` expression, a ``--since``
moment, a ``--by`` grouping) is checked here, before the store is opened: a
malformed one is a ``BadParameter`` (exit 2). Well-formed values are passed on
as they are, and the engine validates them (an unknown status, an invalid
attribute name): its ``InvalidArgumentError`` exits 1 like any engine error.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any

import typer

from pyweft import InvalidDurationError, parse_duration
from pyweft.cli import bad_parameter

_WHEN = "a duration before now (1h, 2 days, 90s) or an ISO-8601 time (2024-05-01T12:00:00Z)"

StatusOption = Annotated[
    list[str] | None,
    typer.Option(
        "--status",
        metavar="STATUS",
        help="Only runs in this status: pending, enqueued, running, suspended, blocked, "
        "completed, failed, cancelled or timed_out. Repeat for any of several.",
    ),
]
CategoryOption = Annotated[
    str | None,
    typer.Option(
        "--category",
        metavar="CATEGORY",
        help="Only runs that failed for this reason: application, timeout, cancellation, "
        "resource, system or non_determinism.",
    ),
]
TypeOption = Annotated[
    str | None, typer.Option("--type", metavar="TYPE", help="Only runs of this workflow type.")
]
IdPrefixOption = Annotated[
    str | None,
    typer.Option("--id-prefix", metavar="PREFIX", help="Only runs whose id starts with this text."),
]
ParentOption = Annotated[
    str | None,
    typer.Option("--parent", metavar="ID", help="Only child runs started by this run."),
]
AttrOption = Annotated[
    list[str] | None,
    typer.Option(
        "--attr",
        metavar="NAME=VALUE",
        help="Only runs whose search attribute matches: NAME=VALUE, or a bound NAME>=VALUE, "
        "NAME>VALUE, NAME<=VALUE, NAME<VALUE. VALUE is a number, true, false or a JSON "
        "string; other text is a string. Repeat to require several (or two bounds).",
    ),
]
TagOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tag", metavar="TAG", help="Only runs carrying this tag. Repeat to require every tag."
    ),
]
SinceOption = Annotated[
    str | None,
    typer.Option(
        "--since",
        metavar="WHEN",
        help=f"Only runs created at or after WHEN: {_WHEN}. A time without a zone is local.",
    ),
]
UntilOption = Annotated[
    str | None,
    typer.Option("--until", metavar="WHEN", help="Only runs created before WHEN (as --since)."),
]
UpdatedSinceOption = Annotated[
    str | None,
    typer.Option(
        "--updated-since",
        metavar="WHEN",
        help="Only runs last changed at or after WHEN (as --since).",
    ),
]
UpdatedUntilOption = Annotated[
    str | None,
    typer.Option(
        "--updated-until", metavar="WHEN", help="Only runs last changed before WHEN (as --since)."
    ),
]

_BOUNDS = {">=": "gte", ">": "gt", "<=": "lte", "<": "lt"}
_ATTR_EXPRESSION = re.compile(r"(?P<name>[^<>=]+?)\s*(?P<op>>=|<=|>|<|=)\s*(?P<value>.*)", re.S)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFilters:
    """The keyword filters of ``Engine.list`` and ``Engine.aggregate``; ``None`` means unset."""

    status: list[str] | None = None
    workflow_type: str | None = None
    id_prefix: str | None = None
    parent_id: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    attributes: dict[str, Any] | None = None
    tags: list[str] | None = None
    failure_category: str | None = None

    def as_kwargs(self) -> dict[str, Any]:
        """The filters that are set, as keyword arguments for the engine."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {name: value for name, value in values.items() if value is not None}


def run_filters(
    *,
    status: list[str] | None = None,
    workflow_type: str | None = None,
    id_prefix: str | None = None,
    parent: str | None = None,
    attrs: list[str] | None = None,
    tags: list[str] | None = None,
    since: str | None = None,
    until: str | None = None,
    updated_since: str | None = None,
    updated_until: str | None = None,
    category: str | None = None,
    now: datetime | None = None,
) -> RunFilters:
    """Parse the filter options; a malformed one ends the command with exit code 2."""
    now = now or datetime.now().astimezone()
    return RunFilters(
        status=status or None,
        workflow_type=workflow_type,
        id_prefix=id_prefix,
        parent_id=parent,
        created_after=moment(since, "--since", now),
        created_before=moment(until, "--until", now),
        updated_after=moment(updated_since, "--updated-since", now),
        updated_before=moment(updated_until, "--updated-until", now),
        attributes=attribute_filters(attrs or []),
        tags=tags or None,
        failure_category=category,
    )


def moment(text: str | None, option: str, now: datetime) -> datetime | None:
    """``text`` as an aware time: a duration counts back from ``now``; naive ISO is local."""
    if text is None:
        return None
    try:
        seconds = parse_duration(text.strip(), field=option)
    except InvalidDurationError:
        pass
    else:
        try:
            return now - timedelta(seconds=seconds)
        except OverflowError:
            bad_parameter(f"{option} {text!r} reaches further back than any date")
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        bad_parameter(f"{option} {text!r} is neither {_WHEN}")
    return parsed if parsed.tzinfo is not None else parsed.astimezone()


def attribute_filters(expressions: list[str]) -> dict[str, Any] | None:
    """``--attr`` expressions as ``Engine.list(attributes=...)``: a value or a dict of bounds."""
    filters: dict[str, Any] = {}
    for expression in expressions:
        name, op, value = _attribute_expression(expression)
        current = filters.get(name)
        if op == "=":
            if name in filters:
                bad_parameter(
                    f"--attr {expression!r}: {name!r} is already filtered; a run's attribute "
                    "cannot equal one value and also match another condition"
                )
            filters[name] = value
            continue
        if name in filters and not isinstance(current, dict):
            bad_parameter(
                f"--attr {expression!r}: {name!r} already has an equality filter; "
                "use either NAME=VALUE or bounds"
            )
        bounds = filters.setdefault(name, {})
        if _BOUNDS[op] in bounds:
            bad_parameter(f"--attr {expression!r}: {name!r} already has a {op} bound")
        bounds[_BOUNDS[op]] = value
    return filters or None


def _attribute_expression(expression: str) -> tuple[str, str, Any]:
    match = _ATTR_EXPRESSION.fullmatch(expression.strip())
    if match is None:
        bad_parameter(
            f"--attr {expression!r} is not NAME=VALUE, NAME>=VALUE, NAME>VALUE, NAME<=VALUE "
            "or NAME<VALUE"
        )
    name, op, text = match["name"], match["op"], match["value"]
    if not text:
        bad_parameter(f"--attr {expression!r} has no value; match an empty string with '\"\"'")
    return name, op, attribute_value(text, expression)


def _no_constants(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity are not JSON: take them as text


def attribute_value(text: str, expression: str) -> Any:
    """A JSON number, true, false or string; any text that is not JSON is a string."""
    try:
        value = json.loads(text, parse_constant=_no_constants)
    except ValueError:
        return text
    if isinstance(value, str | bool | int | float):
        return value
    bad_parameter(
        f"--attr {expression!r}: {text} is JSON but not one value; compare to a number, "
        "true, false or a string (quote it as JSON to match that text: '\"null\"')"
    )


def group_by(by: str) -> str:
    """``--by`` as ``Engine.aggregate(group_by=...)``: status, type or attr:NAME."""
    if by in ("status", "type", "failure_category") or (
        by.startswith("attr:") and len(by) > len("attr:")
    ):
        return by
    bad_parameter(
        f"--by {by!r} is not status, type or attr:NAME (e.g. attr:region), nor failure_category"
    )


__all__ = [
    "AttrOption",
    "IdPrefixOption",
    "ParentOption",
    "RunFilters",
    "SinceOption",
    "StatusOption",
    "TagOption",
    "TypeOption",
    "UntilOption",
    "UpdatedSinceOption",
    "UpdatedUntilOption",
    "attribute_filters",
    "group_by",
    "CategoryOption",
    "moment",
    "run_filters",
]
