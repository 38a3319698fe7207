"""JSON Schemas of a registered workflow's input and output, derived from its type hints.

Used by ``Engine.workflow_schemas`` (and through it the server's registry route and the
dashboard's start form). A parameter whose annotation cannot be expressed as a schema
(or has none) gets ``{}``: anything JSON. Schemas follow JSON Schema 2020-12 with shared
definitions under ``$defs``.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
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


def parameters_schema(
    params: Sequence[inspect.Parameter], types: Sequence[object]
) -> tuple[list[ParameterSchema], dict[str, Any]]:
    """The arguments ``types`` (lined up with the positional ``params``) as
    :class:`ParameterSchema` and the JSON Schema of their positional array."""
    defs: dict[str, Any] = {}
    out: list[ParameterSchema] = []
    for i, tp in enumerate(types):
        p = params[i] if i < len(params) else None
        has_default = p is not None and p.default is not p.empty
        out.append(
            ParameterSchema(
                name=p.name if p is not None else f"arg{i}",
                required=not has_default,
                schema=_one(tp, defs),
                default=_jsonable(p.default) if p is not None and has_default else None,
            )
        )
    array: dict[str, Any] = {
        "type": "array",
        "prefixItems": [{"title": p.name, **p.schema} for p in out],
        "minItems": sum(1 for p in out if p.required),
        "maxItems": len(out),
    }
    if defs:
        array["$defs"] = defs
    return out, array


def positional(sig: inspect.Signature | None) -> list[inspect.Parameter]:
    return [
        p
        for p in (sig.parameters.values() if sig is not None else ())
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]


def summary_line(fn: object) -> str | None:
    doc = inspect.getdoc(fn)
    return doc.splitlines()[0] if doc else None


def workflow_schema(definition: WorkflowDefinition) -> WorkflowSchema:
    # param_types lines up with the positional parameters after the context.
    params, input_schema = parameters_schema(
        positional(definition.signature)[1:], definition.param_types
    )
    defs: dict[str, Any] = {}
    output_schema = _one(definition.result_type, defs)
    if defs:
        output_schema["$defs"] = dict(defs)
    return WorkflowSchema(
        workflow_type=definition.name,
        version=definition.version,
        parameters=params,
        input=input_schema,
        output=output_schema,
        description=summary_line(definition.fn),
    )
