"""``engine.handlers(id)``: what a live run takes (its signal, update and query handlers
and its open waits) with JSON Schemas from the handlers' hints, answered by the engine
that drives the run, here or through the store."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from pyweft import (
    DefinitionError,
    Engine,
    MessageHandlers,
    WorkflowContext,
    WorkflowFailedError,
    workflow,
)
from support.backends import Backend
from support.poll import eventually


@dataclass
class Item:
    sku: str
    quantity: int
    colour: Literal["red", "blue"] = "red"


@workflow
async def basket(ctx: WorkflowContext) -> int:
    items: list[Item] = []

    @ctx.on_signal("add")
    def add(item: Item) -> None:
        """Put an item in the basket."""
        items.append(item)

    def rename(name: str) -> str:
        return name.upper()

    ctx.on_update("rename", rename)
    ctx.on_query("total", lambda discount=0.0: sum(i.quantity for i in items) - discount)
    ctx.on_signal("clear", lambda: items.clear())  # takes no payload
    await ctx.wait_for_signal("close")
    return len(items)


async def _waiting(engine: Engine, workflow_id: str) -> bool:
    with contextlib.suppress(Exception):
        found = await engine.handlers(workflow_id)
        return any(h.name == "close" for h in found.signals)
    return False


def _check(found: MessageHandlers) -> None:
    signals = {h.name: h for h in found.signals}
    assert list(signals) == ["add", "clear", "close"]  # sorted by name
    add = signals["add"]
    assert add.description == "Put an item in the basket." and not add.waiting
    assert [p.name for p in add.parameters] == ["item"] and add.parameters[0].required
    ref = add.parameters[0].schema["$ref"]
    item_schema = add.input["$defs"][ref.split("/")[-1]]
    assert item_schema["properties"]["quantity"] == {"type": "integer"}
    assert sorted(item_schema["properties"]["colour"]["enum"]) == ["blue", "red"]
    assert signals["clear"].parameters == [] and signals["clear"].input["maxItems"] == 0
    # A name only a wait_for_signal step waits on: known, but its payload is untyped.
    close = signals["close"]
    assert close.waiting and close.parameters[0].schema == {}
    (rename,) = found.updates
    assert rename.name == "rename" and rename.parameters[0].schema == {"type": "string"}
    (total,) = found.queries
    assert total.name == "total"
    assert [(p.name, p.required, p.default) for p in total.parameters] == [("discount", False, 0.0)]


async def test_a_live_run_lists_its_handlers_and_waits_with_schemas(backend: Backend) -> None:
    async with backend.engine(workflows=[basket]) as engine:
        await engine.start(basket, id="b")
        await eventually(lambda: _waiting(engine, "b"), what="waiting for close")
        found = await engine.handlers("b")
        assert found.workflow_id == "b"
        _check(found)
        # Through the store, as a process that does not drive the run asks.
        async with backend.engine(role="client") as client:
            remote = await client.handlers("b", timeout=10)
        assert remote == found
        await engine.signal("b", "close")
        assert await engine.result("b", timeout=5) == 0
        finished = await engine.handlers("b")
        assert finished.status == "completed" and finished.signals == finished.queries == []


async def test_the_catalog_query_name_is_reserved() -> None:
    @workflow
    async def squatter(ctx: WorkflowContext) -> None:
        ctx.on_query("__pyweft_handlers__", lambda: "mine")

    async with Engine("memory://", workflows=[squatter]) as engine:
        handle = await engine.start(squatter)
        with pytest.raises(WorkflowFailedError) as err:
            await handle.result(timeout=5)
    assert err.value.error_type == DefinitionError.__name__


def test_the_catalog_rebuilds_from_its_json() -> None:
    data: dict[str, Any] = {
        "signals": [
            {
                "name": "go",
                "parameters": [{"name": "payload", "required": False, "schema": {}}],
                "input": {"type": "array"},
                "waiting": True,
            }
        ]
    }
    found = MessageHandlers.from_dict("r", data)
    assert (
        found.status == "running"
        and found.signals[0].waiting
        and found.updates == []
        and found.queries == []
    )
