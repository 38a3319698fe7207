"""The MCP tools of an engine: what they are called, what they take, what scope each
needs, and how a call becomes an ``Engine`` call. Transport-free and free of the ``mcp``
package, so the HTTP mount and ``pyweft mcp`` (stdio) share one table.

Generic tools mirror the REST routes (and need the same scope): ``start_workflow``,
``list_workflows``, ``describe_workflow``, ``workflow_result``, ``signal_workflow``,
``query_workflow``, ``update_workflow`` and ``cancel_workflow``. Each registered workflow
type also gets ``start_<type>``, whose input schema is the workflow's own parameters
(from ``Engine.workflow_schemas``), so an agent sees what the workflow takes.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyweft import Engine, InvalidArgumentError, ResultTimeoutError
from pyweft.client.wire import dumps as wire_dumps
from pyweft.client.wire import info_to_json, loads, page_to_json

MAX_WAIT_S = 60.0
_NAME_OK = re.compile(r"[^A-Za-z0-9_.-]")

Run = Callable[[Engine, dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSpec:
    """One tool: its name, description, input JSON Schema, the scopes that allow it (any
    one, as for the REST route it mirrors) and the coroutine that runs it. A ``held``
    tool is a long wait: over HTTP it is cancelled when the caller disconnects."""

    name: str
    description: str
    input_schema: dict[str, Any]
    scopes: tuple[str, ...]
    run: Run
    held: bool = False


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (datetimes as ISO text, dataclasses as objects)."""
    return loads(wire_dumps(value))


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": props,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return schema


_ID = {"type": "string", "description": "The run's id."}
_WAIT = {
    "type": "number",
    "minimum": 0,
    "maximum": MAX_WAIT_S,
    "description": f"Seconds to wait, 0 to {MAX_WAIT_S:g}.",
}


def _check(args: Mapping[str, Any], schema: dict[str, Any], tool: str) -> None:
    """Refuse unknown and missing arguments and wrong JSON types, naming each."""
    props: dict[str, Any] = schema.get("properties", {})
    unknown = sorted(set(args) - set(props))
    if unknown:
        raise InvalidArgumentError(
            f"{tool}: unknown argument(s) {', '.join(unknown)}; accepted: "
            f"{', '.join(sorted(props)) or 'none'}"
        )
    missing = [name for name in schema.get("required", ()) if args.get(name) is None]
    if missing:
        raise InvalidArgumentError(f"{tool}: missing required argument(s) {', '.join(missing)}")
    for name, value in args.items():
        expected = props[name].get("type")
        if expected is None or value is None:
            continue
        kinds = expected if isinstance(expected, list) else [expected]
        if not any(_is(value, k) for k in kinds):
            raise InvalidArgumentError(
                f"{tool}: argument {name!r} must be {' or '.join(kinds)}, "
                f"got {type(value).__name__}"
            )


def _is(value: Any, kind: str) -> bool:
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return {
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "array": isinstance(value, list),
        "object": isinstance(value, dict),
        "null": value is None,
    }.get(kind, True)


def _wait(args: Mapping[str, Any], default: float) -> float:
    wait = float(args.get("wait_s", default))
    if not 0 <= wait <= MAX_WAIT_S:
        raise InvalidArgumentError(f"wait_s must be from 0 to {MAX_WAIT_S:g} seconds")
    return wait


async def _start(engine: Engine, args: dict[str, Any]) -> Any:
    handle = await engine.start(
        args["type"],
        *args.get("args", []),
        id=args.get("id"),
        idempotency_key=args.get("idempotency_key"),
        on_conflict=args.get("on_conflict") or "fail",
        tags=args.get("tags", []),
    )
    return {"id": handle.id}


async def _list(engine: Engine, args: dict[str, Any]) -> Any:
    limit = args.get("limit", 20)
    if not 1 <= limit <= 1000:
        raise InvalidArgumentError("limit must be from 1 to 1000")
    page = await engine.list(
        status=args.get("status"),
        workflow_type=args.get("type"),
        id_prefix=args.get("id_prefix"),
        tags=args.get("tags"),
        limit=limit,
        cursor=args.get("cursor"),
    )
    return page_to_json(page)


async def _describe(engine: Engine, args: dict[str, Any]) -> Any:
    return info_to_json(await engine.describe(args["workflow_id"]))


async def _result(engine: Engine, args: dict[str, Any]) -> Any:
    workflow_id = args["workflow_id"]
    wait = _wait(args, 10.0)
    try:
        value = await engine.result(workflow_id, timeout=wait)
    except TimeoutError as exc:
        if isinstance(exc, ResultTimeoutError):
            raise
        raise ResultTimeoutError(
            f"run {workflow_id!r} did not finish within {wait:g}s; call workflow_result again",
            workflow_id=workflow_id,
        ) from None
    return {"id": workflow_id, "status": "completed", "result": value}


async def _signal(engine: Engine, args: dict[str, Any]) -> Any:
    await engine.signal(
        args["workflow_id"], args["name"], args.get("payload"), signal_id=args.get("signal_id")
    )
    return {"ok": True}


async def _query(engine: Engine, args: dict[str, Any]) -> Any:
    timeout = _wait(args, 5.0) or 5.0
    value = await engine.query(
        args["workflow_id"], args["name"], *args.get("args", []), timeout=timeout
    )
    return {"result": value}


async def _update(engine: Engine, args: dict[str, Any]) -> Any:
    extra: tuple[Any, ...] = (args["payload"],) if "payload" in args else ()
    value = await engine.update(
        args["workflow_id"],
        args["name"],
        *extra,
        timeout=_wait(args, 5.0) or 5.0,
        idempotency_key=args.get("idempotency_key"),
    )
    return {"result": value}


async def _cancel(engine: Engine, args: dict[str, Any]) -> Any:
    await engine.cancel(args["workflow_id"])
    return {"ok": True}


GENERIC: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="start_workflow",
        description="Start a run of a registered workflow type with positional arguments; "
        "returns its id. The start_<type> tools take named arguments instead.",
        input_schema=_obj(
            {
                "type": {"type": "string", "description": "The registered workflow type."},
                "args": {"type": "array", "description": "Positional arguments."},
                "id": {"type": "string", "description": "Run id (default: generated)."},
                "idempotency_key": {"type": "string"},
                "on_conflict": {"type": "string", "enum": ["fail", "use_existing"]},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            ("type",),
        ),
        scopes=("workflows:write",),
        run=_start,
    ),
    ToolSpec(
        name="list_workflows",
        description="List runs, newest first, filtered by status, type, id prefix or tags.",
        input_schema=_obj(
            {
                "status": {"type": ["string", "array"], "description": "One status or several."},
                "type": {"type": "string", "description": "Workflow type."},
                "id_prefix": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                "cursor": {"type": "string", "description": "next_cursor of the last page."},
            }
        ),
        scopes=("workflows:read",),
        run=_list,
    ),
    ToolSpec(
        name="describe_workflow",
        description="A run's status, type, times, attributes, tags and error.",
        input_schema=_obj({"workflow_id": _ID}, ("workflow_id",)),
        scopes=("workflows:read",),
        run=_describe,
    ),
    ToolSpec(
        name="workflow_result",
        description="Wait (bounded) for a run's result. A failed or cancelled run is an "
        "error naming why; a run still going after wait_s is a ResultTimeoutError.",
        input_schema=_obj({"workflow_id": _ID, "wait_s": _WAIT}, ("workflow_id",)),
        scopes=("workflows:read",),
        run=_result,
        held=True,
    ),
    ToolSpec(
        name="signal_workflow",
        description="Send a named signal with an optional payload to a run.",
        input_schema=_obj(
            {
                "workflow_id": _ID,
                "name": {"type": "string", "description": "The signal name."},
                "payload": {"description": "Any JSON value."},
                "signal_id": {"type": "string", "description": "Deduplication id."},
            },
            ("workflow_id", "name"),
        ),
        scopes=("signals:write",),
        run=_signal,
    ),
    ToolSpec(
        name="query_workflow",
        description="Ask a running workflow's query handler; changes nothing.",
        input_schema=_obj(
            {
                "workflow_id": _ID,
                "name": {"type": "string", "description": "The query name."},
                "args": {"type": "array"},
                "wait_s": _WAIT,
            },
            ("workflow_id", "name"),
        ),
        scopes=("queries:read",),
        run=_query,
        held=True,
    ),
    ToolSpec(
        name="update_workflow",
        description="Send an update to a run and wait for its handler's answer.",
        input_schema=_obj(
            {
                "workflow_id": _ID,
                "name": {"type": "string", "description": "The update name."},
                "payload": {"description": "Any JSON value."},
                "wait_s": _WAIT,
                "idempotency_key": {"type": "string"},
            },
            ("workflow_id", "name"),
        ),
        scopes=("updates:write",),
        run=_update,
        held=True,
    ),
    ToolSpec(
        name="cancel_workflow",
        description="Cancel a run (a finished run is left as it is).",
        input_schema=_obj({"workflow_id": _ID}, ("workflow_id",)),
        scopes=("workflows:write",),
        run=_cancel,
    ),
)


def _start_typed(workflow_type: str, params: list[tuple[str, Any]]) -> Run:
    async def run(engine: Engine, args: dict[str, Any]) -> Any:
        # Up to the last argument given, a skipped optional one takes its default.
        given = [i for i, (n, _) in enumerate(params) if n in args]
        upto = given[-1] + 1 if given else 0
        positional = [args.get(n, default) for n, default in params[:upto]]
        handle = await engine.start(workflow_type, *positional, id=args.get("workflow_id"))
        return {"id": handle.id}

    return run


def workflow_tools(engine: Engine) -> list[ToolSpec]:
    """``start_<type>`` for each registered workflow type, its parameters as properties."""
    taken = {t.name for t in GENERIC}
    out: list[ToolSpec] = []
    for ws in engine.workflow_schemas():
        name = "start_" + _NAME_OK.sub("_", ws.workflow_type)
        names = [p.name for p in ws.parameters]
        if name in taken or len(name) > 128 or "workflow_id" in names:
            continue  # start_workflow covers it
        taken.add(name)
        props: dict[str, Any] = {p.name: dict(p.schema) for p in ws.parameters}
        for p in ws.parameters:
            if not p.required:
                props[p.name]["default"] = p.default
        props["workflow_id"] = {"type": "string", "description": "Run id (default: generated)."}
        schema = _obj(props, tuple(p.name for p in ws.parameters if p.required))
        defs = ws.input.get("$defs")
        if defs:
            schema["$defs"] = defs
        about = ws.description or f"Start a run of {ws.workflow_type}"
        out.append(
            ToolSpec(
                name=name,
                description=f"{about} (workflow {ws.workflow_type!r}, version {ws.version}); "
                "returns the run id. Read the result with workflow_result.",
                input_schema=schema,
                scopes=("workflows:write",),
                run=_start_typed(ws.workflow_type, [(p.name, p.default) for p in ws.parameters]),
            )
        )
    return out


def all_tools(engine: Engine) -> dict[str, ToolSpec]:
    return {t.name: t for t in (*GENERIC, *workflow_tools(engine))}


async def call(spec: ToolSpec, engine: Engine, arguments: Mapping[str, Any] | None) -> Any:
    """Check ``arguments`` against the tool's schema, run it, and return JSON data."""
    args = dict(arguments or {})
    _check(args, spec.input_schema, spec.name)
    return jsonable(await spec.run(engine, args))
