"""JSON Schemas of a registered workflow's input and output, derived from its type hints.

Used by ``Engine.workflow_schemas`` (and through it the server's registry route and the
dashboard's start form). A parameter whose annotation cannot be expressed as a schema
(or has none) gets ``{}``: anything JSON. Schemas follow JSON Schema 2020-12 with shared
definitions under ``$defs``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, cast

import msgspec

from pyweft.definitions import WorkflowDefinition

_REF_TEMPLATE = "#/$defs/{name}"


@dataclass(frozen=True, kw_only=True, slots=True)
class ParameterSchema:
    """One workflow argument (after the context), in call order."""

    name: str
    required: bool
    schema: dict[str, Any]
    default: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkflowSchema:
    """A registered workflow type: its version, arguments and the JSON Schemas of its
    input (the positional argument array) and output (the result)."""

    workflow_type: str
    version: str
    parameters: list[ParameterSchema]
    input: dict[str, Any]
    output: dict[str, Any]
    description: str | None = None


def _one(tp: object, defs: dict[str, Any]) -> dict[str, Any]:
    if tp is Any or tp is inspect.Parameter.empty:
        return {}
    try:
        (schema,), components = msgspec.json.schema_components((tp,), ref_template=_REF_TEMPLATE)
    except Exception:  # a type msgspec does not know: try pydantic, else accept any JSON
        adapter = _pydantic_schema(tp)
        if adapter is None:
            return {}
        schema, components = adapter
    defs.update(components)
    return dict(schema)


def _pydantic_schema(tp: object) -> tuple[dict[str, Any], dict[str, Any]] | None:
    try:
        from pydantic import TypeAdapter
    except ImportError:
        return None
    try:
        full = TypeAdapter(cast(Any, tp)).json_schema(ref_template=_REF_TEMPLATE)
    except Exception:
        return None
    defs = full.pop("$defs", {})
    return full, defs


def _jsonable(value: Any) -> Any:
    try:
        return msgspec.json.decode(msgspec.json.encode(value))
    except Exception:
        return repr(value)


def workflow_schema(definition: WorkflowDefinition) -> WorkflowSchema:
    defs: dict[str, Any] = {}
    params: list[ParameterSchema] = []
    sig = definition.signature
    positional = [
        p
        for p in (sig.parameters.values() if sig is not None else ())
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ][1:]  # param_types lines up with these, the context dropped
    for i, tp in enumerate(definition.param_types):
        p = positional[i] if i < len(positional) else None
        has_default = p is not None and p.default is not p.empty
        params.append(
            ParameterSchema(
                name=p.name if p is not None else f"arg{i}",
                required=not has_default,
                schema=_one(tp, defs),
                default=_jsonable(p.default) if p is not None and has_default else None,
            )
        )
    required = sum(1 for p in params if p.required)
    input_schema: dict[str, Any] = {
        "type": "array",
        "prefixItems": [{"title": p.name, **p.schema} for p in params],
        "minItems": required,
        "maxItems": len(params),
    }
    input_defs = dict(defs)
    defs.clear()
    output_schema = _one(definition.result_type, defs)
    if input_defs:
        input_schema["$defs"] = input_defs
    if defs:
        output_schema["$defs"] = dict(defs)
    doc = inspect.getdoc(definition.fn)
    return WorkflowSchema(
        workflow_type=definition.name,
        version=definition.version,
        parameters=params,
        input=input_schema,
        output=output_schema,
        description=doc.splitlines()[0] if doc else None,
    )
