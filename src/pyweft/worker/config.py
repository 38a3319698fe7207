"""The options every kind of worker checks alike: queues, concurrency, activities."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pyweft.definitions import ActivityDefinition, activity_definition_of
from pyweft.engine.tasks import records as tr
from pyweft.errors import ConfigurationError, InvalidArgumentError


def check_queues(queues: Iterable[str]) -> tuple[str, ...]:
    """The queue names, deduplicated in order, or ``ConfigurationError``."""
    if isinstance(queues, str):
        raise ConfigurationError(f"queues must be a list of names, got {queues!r}")
    try:
        names = tuple(dict.fromkeys(tr.check_queue(q, field="each of queues") for q in queues))
    except InvalidArgumentError as exc:
        raise ConfigurationError(str(exc)) from None
    if not names:
        raise ConfigurationError("queues must name at least one queue to serve")
    return names


def check_concurrency(concurrency: object) -> int:
    if type(concurrency) is not int or not 1 <= concurrency <= 1000:
        raise ConfigurationError(f"concurrency must be an int in 1..1000, got {concurrency!r}")
    return concurrency


def activity_table(activities: Iterable[Callable[..., Any]]) -> dict[str, ActivityDefinition]:
    """The ``@activity`` functions by name, or ``ConfigurationError``."""
    if callable(activities) or isinstance(activities, str):
        raise ConfigurationError("activities must be a list of functions")
    table: dict[str, ActivityDefinition] = {}
    for fn in activities:
        act = activity_definition_of(fn)
        table[act.name] = act
    return table
