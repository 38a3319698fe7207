"""What a live run answers to: the signals, updates and queries it has registered
handlers for, and the names its open ``wait_for_signal``/``wait_for_update`` steps wait
on, each with the JSON Schema of its payload or arguments (from the handler's hints).

Handlers are registered by the workflow's code as it runs (``ctx.on_signal``...), so
only the engine that drives the run knows them. ``engine.handlers(id)`` asks it through
the query path (a reserved query name): at once when the run is driven here (an evicted
run is loaded to answer), through the store when another process drives it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyweft.codec import call_types
from pyweft.engine.replay.run import Run
from pyweft.engine.schemas import ParameterSchema, parameters_schema, positional, summary_line

HANDLERS_QUERY = "__pyweft_handlers__"
"""The reserved query name the catalog travels under (``ctx.on_query`` refuses it)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HandlerInfo:
    """One signal, update or query a run takes.

    ``parameters`` and ``input`` follow ``WorkflowSchema``: for a signal or update the
    payload (none when the handler takes none), for a query its arguments; ``input`` is
    the JSON Schema (2020-12) of the positional array, shared definitions under
    ``$defs``. ``waiting`` marks a name with no handler that an open
    ``ctx.wait_for_signal``/``wait_for_update`` step waits on: its payload is untyped
    (one parameter with schema ``{}``).
    """

    name: str
    parameters: list[ParameterSchema]
    input: dict[str, Any]
    waiting: bool = False
    description: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageHandlers:
    """``engine.handlers(id)``: what a run takes now, by kind, sorted by name. Only a
    ``running`` run has handlers to tell; for any other ``status`` the lists are empty
    (a pending, suspended or blocked run still buffers signals and updates sent to it,
    by any name)."""

    workflow_id: str
    status: str
    signals: list[HandlerInfo]
    updates: list[HandlerInfo]
    queries: list[HandlerInfo]

    @classmethod
    def from_dict(cls, workflow_id: str, data: Mapping[str, Any]) -> MessageHandlers:
        """Rebuilt from its JSON (another process's answer, the HTTP API's body)."""

        def one(raw: Mapping[str, Any]) -> HandlerInfo:
            return HandlerInfo(
                name=str(raw["name"]),
                parameters=[ParameterSchema(**p) for p in raw.get("parameters") or ()],
                input=dict(raw.get("input") or {}),
                waiting=bool(raw.get("waiting")),
                description=raw.get("description"),
            )

        return cls(
            workflow_id=workflow_id,
            status=str(data.get("status") or "running"),
            signals=[one(h) for h in data.get("signals") or ()],
            updates=[one(h) for h in data.get("updates") or ()],
            queries=[one(h) for h in data.get("queries") or ()],
        )


def _described(name: str, fn: Callable[..., Any], *, payload_only: bool) -> HandlerInfo:
    types, _, _ = call_types(fn, skip_first=False)
    try:
        params = positional(inspect.signature(fn))
    except (TypeError, ValueError):
        params = []
    if payload_only:  # signals and updates carry one payload at most
        types = types[:1]
    parameters, array = parameters_schema(params, types)
    return HandlerInfo(
        name=name,
        parameters=parameters,
        input=array,
        description=summary_line(inspect.unwrap(fn)),
    )


def _waiting(name: str) -> HandlerInfo:
    payload = ParameterSchema(name="payload", required=False, schema={})
    array = {"type": "array", "prefixItems": [{"title": "payload"}], "minItems": 0, "maxItems": 1}
    return HandlerInfo(name=name, parameters=[payload], input=array, waiting=True)


def catalog(run: Run) -> MessageHandlers:
    """The run's handlers and open waits as of now (called from its own event loop)."""
    signals = {
        name: _described(name, h.fn, payload_only=True) for name, h in run.signal_handlers.items()
    }
    updates = {
        name: _described(name, h.fn, payload_only=True) for name, h in run.update_handlers.items()
    }
    for name, count in run.signal_waits.items():
        if count and name not in signals:
            signals[name] = _waiting(name)
    for name, count in run.update_waits.items():
        if count and name not in updates:
            updates[name] = _waiting(name)
    queries = [_described(name, fn, payload_only=False) for name, fn in run.query_handlers.items()]
    return MessageHandlers(
        workflow_id=run.id,
        status="running",
        signals=sorted(signals.values(), key=lambda h: h.name),
        updates=sorted(updates.values(), key=lambda h: h.name),
        queries=sorted(queries, key=lambda h: h.name),
    )


def from_answer(workflow_id: str, value: object) -> MessageHandlers:
    """The catalog as answered: itself here, or its decoded JSON from another process."""
    if isinstance(value, MessageHandlers):
        return value
    return MessageHandlers.from_dict(workflow_id, value if isinstance(value, Mapping) else {})


def idle(workflow_id: str, status: str) -> MessageHandlers:
    """What a run that is not running takes: nothing it has declared."""
    return MessageHandlers(
        workflow_id=workflow_id, status=status, signals=[], updates=[], queries=[]
    )
