"""Fill a store for the dashboard: finished and waiting runs, one with many steps, a
failure, and a schedule. Run before ``pyweft serve`` opens the same store."""

from __future__ import annotations

import asyncio
import sys

from pyweft import Engine, WorkflowContext, workflow
from support.poll import eventually

from .shop import IMPORTS, Order, checkout, count_stock, many_steps, nightly, tell_team


@workflow(name="audit")
async def audit_as_first_deployed(ctx: WorkflowContext, sku: str) -> int:
    """The older code of ``shop.audit``: after counting it told the team."""
    count = await ctx.run(count_stock, sku)
    await ctx.run(tell_team, sku)
    await ctx.wait_for_signal("done")
    return count


async def seed(url: str, *, steps: int = 40) -> None:
    flows = [checkout, many_steps, nightly, audit_as_first_deployed]
    async with Engine(url, workflows=flows, queues=[IMPORTS]) as engine:
        done = await engine.start(many_steps, steps, id="long-run", tags=["batch"])
        await done.result(timeout=60)
        for i in range(3):
            await engine.start(checkout, Order(sku=f"sku-{i}", quantity=i + 1), id=f"order-{i}")
            await engine.set_attributes(f"order-{i}", {"region": "eu" if i == 0 else "us"})
        await engine.start(many_steps, -1, id="bad-run")  # completes at once with 0
        await engine.create_schedule("nightly-report", nightly, cron="0 3 * * *")
        # Recorded by the older code: `pyweft serve` (the newer shop.audit) blocks it.
        drifted = await engine.start("audit", "sku-9", id="drifted-run")

        async def recorded() -> bool:
            return len((await engine.history(drifted.id)).steps) >= 2

        await eventually(recorded, what="the older audit's two steps")


if __name__ == "__main__":
    asyncio.run(seed(sys.argv[1]))
