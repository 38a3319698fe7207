"""Calls that mypy and pyright must each refuse: one per line, marked ``# expect-error``.

Checked by ``test_type_checks.py``, never run: every marked line must get an
error from each checker and no other line may. Results are checked by passing
them where another type is wanted (``want_int(...)``), not by assigning them
to unused variables, which pyright's strict mode would flag for another reason.
"""

# pyright: strict

from __future__ import annotations

from dataclasses import dataclass

import pyweft.sync
from pyweft import Engine, WorkflowContext, activity, workflow


@dataclass
class Receipt:
    order_id: str
    cents: int


@activity
async def charge(order_id: str, cents: int) -> Receipt:
    return Receipt(order_id=order_id, cents=cents)


@activity
def count(sku: str) -> int:
    return len(sku)


class Inventory:
    @activity
    async def reserve(self, sku: str, qty: int = 1) -> bool:
        return qty > 0 and bool(sku)


@workflow
async def checkout(ctx: WorkflowContext, order_id: str, cents: int) -> Receipt:
    return await ctx.run(charge, order_id, cents)


def want_int(value: int) -> None:
    del value


def want_str(value: str) -> None:
    del value


async def activities(ctx: WorkflowContext) -> None:
    await ctx.run(charge, "o-1", "not-an-int")  # expect-error
    await ctx.run(charge, "o-1")  # expect-error
    await ctx.run(charge, "o-1", 1, 2)  # expect-error
    await ctx.run(count, 3)  # expect-error
    await ctx.run(Inventory().reserve, 5)  # expect-error
    await ctx.run(Inventory().reserve, "apple", "2")  # expect-error
    await ctx.run(charge, "o-1", 1, retry=3)  # expect-error
    await ctx.run(charge, "o-1", 1, timeout=[1])  # expect-error
    await ctx.run(charge, "o-1", 1, not_an_option=1)  # expect-error
    want_int(await ctx.run(charge, "o-1", 1))  # expect-error
    want_str(await ctx.run(count, "apple"))  # expect-error


async def children(ctx: WorkflowContext) -> None:
    await ctx.start_child(checkout, "o-1")  # expect-error
    await ctx.start_child(checkout, "o-1", "100")  # expect-error
    await ctx.start_child(checkout, "o-1", 1, parent_close_policy="abandn")  # expect-error
    await ctx.start_child(charge, "o-1", 1)  # expect-error
    want_int(await ctx.start_child(checkout, "o-1", 1))  # expect-error
    want_int(await ctx.start_child(checkout, "o", 1, parent_close_policy="abandon"))  # expect-error


async def async_engine(engine: Engine) -> None:
    await engine.start(checkout, "o-1", "250")  # expect-error
    await engine.start(checkout, 250)  # expect-error
    await engine.start(checkout, "o-1", 250, 3)  # expect-error
    await engine.start(checkout, "o-1", 250, idd="order-1")  # expect-error
    await engine.start(checkout, "o-1", 250, on_conflict="replace")  # expect-error
    await engine.start(charge, "o-1", 250)  # expect-error
    want_int(await (await engine.start(checkout, "o-1", 250)).result())  # expect-error
    await engine.start_or_signal(checkout, "o-1", signal=("paid", 1))  # expect-error
    await engine.start_or_signal(checkout, "o-1", 250)  # expect-error
    engine.get_handle("order-1", "order-2")  # expect-error
    want_int(await engine.get_handle("order-1", Receipt).result())  # expect-error


def sync_engine(engine: pyweft.sync.Engine) -> None:
    engine.start(checkout, 1, 2)  # expect-error
    want_int(engine.start(checkout, "o-1", 250).result())  # expect-error
    engine.start_or_signal(checkout, "o-1", "250", signal=("paid", 1))  # expect-error
    want_str(engine.get_handle("order-1", int).result())  # expect-error


@workflow  # expect-error
def not_async(ctx: WorkflowContext) -> int:
    return 1
