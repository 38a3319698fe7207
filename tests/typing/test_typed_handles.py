"""The typed API at run time: ``result_type`` and the typed overloads change no behaviour."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NewType

import pytest

import pyweft.sync
from pyweft import Engine, InvalidArgumentError, WorkflowContext, activity, workflow

OrderId = NewType("OrderId", str)


@dataclass
class Receipt:
    order_id: str
    cents: int


@activity
async def charge(order_id: str, cents: int) -> Receipt:
    return Receipt(order_id=order_id, cents=cents)


class Ledger:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def record(self, line: str) -> int:
        self.lines.append(line)
        return len(self.lines)


LEDGER = Ledger()


@workflow
async def checkout(ctx: WorkflowContext, order_id: str, cents: int = 100) -> Receipt:
    receipt = await ctx.run(charge, order_id, cents)
    await ctx.run(LEDGER.record, f"{order_id}:{receipt.cents}")
    return receipt


@workflow
async def parent(ctx: WorkflowContext, order_id: str) -> tuple[Receipt, str]:
    paid = await ctx.start_child(checkout, order_id, 7)
    abandoned = await ctx.start_child(
        checkout, f"{order_id}-later", parent_close_policy="abandon", id=f"{order_id}-later"
    )
    return (paid, abandoned)


async def test_a_handle_typed_with_result_type_returns_what_an_untyped_one_does() -> None:
    async with Engine("memory://", workflows=[checkout]) as engine:
        started = await engine.start(checkout, "o-1", 250, id="o-1")
        typed = engine.get_handle("o-1", Receipt)
        by_keyword = engine.get_handle("o-1", result_type=Receipt)
        plain = engine.get_handle("o-1")
        assert await started.result() == Receipt(order_id="o-1", cents=250)
        assert await typed.result() == await plain.result() == await by_keyword.result()
        assert typed.id == plain.id == "o-1"


async def test_child_results_and_abandoned_child_ids_are_unchanged_by_the_overloads() -> None:
    async with Engine("memory://", workflows=[checkout, parent]) as engine:
        handle = await engine.start(parent, "p", id="p")
        assert await handle.result() == (Receipt(order_id="p", cents=7), "p-later")
        later = await engine.get_handle("p-later", Receipt).result()
        assert later == Receipt(order_id="p-later", cents=100)


@pytest.mark.parametrize(
    "result_type", [int, list[int], dict[str, Receipt], int | None, Any, OrderId, None]
)
async def test_get_handle_accepts_anything_a_type_checker_takes_as_a_type(
    result_type: Any,
) -> None:
    async with Engine("memory://", workflows=[checkout]) as engine:
        assert engine.get_handle("o-1", result_type).id == "o-1"


@pytest.mark.parametrize("bad", ["order-2", 3, Receipt(order_id="o", cents=1)])
async def test_get_handle_refuses_a_result_type_that_is_not_a_type(bad: Any) -> None:
    async with Engine("memory://", workflows=[checkout]) as engine:
        with pytest.raises(InvalidArgumentError, match="result_type must be a type") as err:
            engine.get_handle("o-1", bad)
        assert repr(bad) in str(err.value)
        assert "get_handle(workflow_id, Receipt)" in str(err.value)
        page = await engine.list()
        assert page.items == []


def test_the_sync_facade_types_handles_the_same_way_and_refuses_a_non_type() -> None:
    with pyweft.sync.Engine("memory://", workflows=[checkout]) as engine:
        handle = engine.start(checkout, "s-1", 5, id="s-1")
        assert handle.result(timeout="10s") == Receipt(order_id="s-1", cents=5)
        assert engine.get_handle("s-1", Receipt).result() == Receipt(order_id="s-1", cents=5)
        started, how = engine.start_or_signal(checkout, "s-2", signal=("ignored", 1), id="s-2")
        assert how == "started"
        assert started.result(timeout="10s") == Receipt(order_id="s-2", cents=100)
        with pytest.raises(InvalidArgumentError, match="result_type must be a type"):
            engine.get_handle("s-1", "s-2")  # type: ignore[call-overload]
