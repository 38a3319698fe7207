"""Calls that must type-check cleanly under ``mypy --strict`` and pyright's strict mode.

Checked by ``test_type_checks.py``, never run. ``assert_type`` pins what the
checkers infer: a result typed ``Any`` where the workflow's own type is known
fails here just as a wrongly refused call does.
"""

# pyright: strict

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, assert_type

import pyweft.sync
from pyweft import Engine, WorkflowContext, WorkflowHandle, activity, workflow


@dataclass
class Receipt:
    order_id: str
    cents: int


@activity
async def charge(order_id: str, cents: int) -> Receipt:
    return Receipt(order_id=order_id, cents=cents)


@activity(name="notify", timeout="30s")
def notify(email: str, *, urgent: bool = False) -> None:
    del email, urgent


def plain_function(n: int) -> list[int]:
    return list(range(n))


class Inventory:
    """Activities as methods of an object the user builds (sharing, say, a connection)."""

    def __init__(self, stock: dict[str, int]) -> None:
        self.stock = stock

    @activity
    async def reserve(self, sku: str, qty: int = 1) -> bool:
        return self.stock.get(sku, 0) >= qty

    def count(self, sku: str) -> int:
        return self.stock.get(sku, 0)


@workflow
async def checkout(ctx: WorkflowContext, order_id: str, cents: int) -> Receipt:
    receipt = await ctx.run(charge, order_id, cents)
    assert_type(receipt, Receipt)
    assert_type(await ctx.run(notify, "a@example.com"), None)
    assert_type(await ctx.run(plain_function, 3), list[int])
    assert_type(await ctx.run(charge, order_id, cents, retry=None, timeout="1m"), Receipt)
    assert_type(await ctx.run("notify", "a@example.com"), Any)
    return receipt


@workflow(name="stock-check", version="2")
async def stock_check(ctx: WorkflowContext, sku: str, qty: int = 1) -> dict[str, int]:
    inventory = Inventory({"apple": 3})
    assert_type(await ctx.run(inventory.reserve, sku), bool)
    assert_type(await ctx.run(inventory.reserve, sku, qty), bool)
    assert_type(await ctx.run(inventory.count, sku), int)
    counted = activity(inventory.count)  # a bound method decorated where it is registered
    assert_type(await ctx.run(counted, sku), int)
    assert_type(await ctx.run(activity(retry=None)(inventory.count), sku), int)
    return {sku: qty}


@workflow
async def parent(ctx: WorkflowContext, order_id: str) -> str:
    receipt = await ctx.start_child(checkout, order_id, 100, id=f"{order_id}-pay")
    assert_type(receipt, Receipt)
    assert_type(await ctx.start_child(stock_check, "apple"), dict[str, int])
    child_id = await ctx.start_child(stock_check, "pear", 2, parent_close_policy="abandon")
    assert_type(child_id, str)
    assert_type(await ctx.start_child("checkout", order_id, 5), Any)
    assert_type(await ctx.start_child("checkout", parent_close_policy="request_cancel"), str)
    return receipt.order_id


async def async_engine(engine: Engine) -> None:
    handle = await engine.start(checkout, "o-1", 250, id="order-o-1", on_conflict="use_existing")
    assert_type(handle, WorkflowHandle[Receipt])
    assert_type(await handle.result(), Receipt)
    assert_type(await handle.result(timeout="5s"), Receipt)
    assert_type(await engine.start(stock_check, "apple"), WorkflowHandle[dict[str, int]])
    assert_type(await engine.start("checkout", "o-2", 1), WorkflowHandle[Any])
    started = await engine.start_or_signal(stock_check, "kiwi", 4, signal=("restock", 10))
    assert_type(started, tuple[WorkflowHandle[dict[str, int]], Literal["started", "signalled"]])
    assert_type(engine.get_handle("order-o-1"), WorkflowHandle[Any])
    assert_type(engine.get_handle("order-o-1", Receipt), WorkflowHandle[Receipt])
    typed = engine.get_handle("order-o-1", result_type=Receipt)
    assert_type(await typed.result(), Receipt)
    # A handle of a narrower result is a handle of a wider one.
    wider: WorkflowHandle[object] = handle
    del wider


def sync_engine(engine: pyweft.sync.Engine) -> None:
    handle = engine.start(checkout, "o-1", 250, id="order-o-1", on_conflict="use_existing")
    assert_type(handle, pyweft.sync.WorkflowHandle[Receipt])
    assert_type(handle.result(timeout=5), Receipt)
    assert_type(engine.start("checkout", "o-2", 1).result(), Any)
    started, how = engine.start_or_signal(stock_check, "kiwi", signal=("restock", 10))
    assert_type(started.result(), dict[str, int])
    assert_type(how, Literal["started", "signalled"])
    assert_type(engine.get_handle("o-1", Receipt).result(), Receipt)
    assert_type(engine.get_handle("o-1"), pyweft.sync.WorkflowHandle[Any])
