"""The app the browser tests serve with ``pyweft serve tests.browser.shop:engine``: an
order workflow that charges, waits for a signal, asks for a review and ships; a
schedule; a run with many steps; a workflow queue; and an activity on the ``labels``
task queue that ``pyweft worker tests.browser.shop --queue labels`` serves. The store is
the SQLite file in ``$PYWEFT_DASH_DB``."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Literal

from pyweft import Engine, Queue, WorkflowContext, activity, activity_context, workflow
from pyweft.observability.metrics import MetricsInterceptor

IMPORTS = Queue("imports", concurrency=2, rate_limit=(30, "1m"))


@dataclass
class Order:
    sku: str
    quantity: int


@activity
async def charge(order: Order) -> dict[str, Any]:
    return {"charged": order.quantity * 10, "sku": order.sku}


@activity
async def ship(sku: str) -> str:
    return f"shipped {sku}"


@workflow
async def checkout(ctx: WorkflowContext, order: Order, priority: int = 1) -> dict[str, Any]:
    """Charge, wait for the warehouse, get a human's approval, ship."""
    receipt = await ctx.run(charge, order)
    packed = await ctx.wait_for_signal("packed", timeout="1d")
    decision = await ctx.review({"order": order.sku, "receipt": receipt}, review_type="ship-it")
    if decision.decision != "approved":
        return {"shipped": False, "decision": decision.decision}
    shipped = await ctx.run(ship, order.sku)
    return {"shipped": True, "note": shipped, "packed": packed, "priority": priority}


@activity
async def tick(i: int) -> int:
    return i


@workflow
async def many_steps(ctx: WorkflowContext, count: int) -> int:
    total = 0
    for i in range(count):
        total += await ctx.run(tick, i)
    return total


@workflow
async def nightly(ctx: WorkflowContext) -> str:
    return "report"


@activity
async def pack_boxes(count: int) -> int:
    """Reports its progress by heartbeat, then works until the run is cancelled."""
    activity_context().heartbeat({"packed": 2, "of": count})
    await asyncio.Event().wait()  # cancelled with the run
    return count


@workflow
async def packing(ctx: WorkflowContext, count: int) -> int:
    return await ctx.run(pack_boxes, count)


@activity(queue="labels")
async def print_label(sku: str) -> str:
    return f"label for {sku}"


@dataclass
class Address:
    city: str
    zip_code: str | None = None


@dataclass
class Restock:
    sku: str
    quantity: int
    urgent: bool
    colour: Literal["red", "blue"]
    tags: list[str]
    ship_to: Address


@workflow
async def restocking(ctx: WorkflowContext, sku: str) -> dict[str, Any]:
    """Waits for a typed ``restock`` signal (its form is generated from the schema)."""
    received: list[Restock] = []

    @ctx.on_signal("restock")
    def restock(order: Restock) -> None:
        """Add stock for a SKU."""
        received.append(order)

    @ctx.on_update("note")
    def note(text: str, urgent: bool = False) -> str:
        return f"noted {text}" + (" (urgent)" if urgent else "")

    ctx.on_query("received", lambda: len(received))
    await ctx.wait_until(lambda: bool(received))
    return dataclasses.asdict(received[0])


@activity
async def count_stock(sku: str) -> int:
    return 12


@activity
async def weigh_stock(sku: str, boxes: int) -> int:
    return boxes * 3


@activity
async def tell_team(sku: str) -> None:
    return None


@workflow
async def audit(ctx: WorkflowContext, sku: str) -> int:
    """The deployed code weighs after counting; runs recorded by the older code (which
    told the team instead, see seed.py) no longer replay: blocked, with a drift to show."""
    await ctx.run(count_stock, sku)
    weight = await ctx.run(weigh_stock, sku, 3)
    await ctx.wait_for_signal("done")
    return weight


def make_engine() -> Engine:
    url = os.environ.get("PYWEFT_DASH_DB", "sqlite:///dashboard-demo.db")
    return Engine(
        url,
        workflows=[checkout, many_steps, nightly, packing, restocking, audit],
        queues=[IMPORTS],
        interceptors=[MetricsInterceptor()],
    )


engine = make_engine
