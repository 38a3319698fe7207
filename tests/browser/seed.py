"""Fill a store for the dashboard: finished and waiting runs, one with many steps, a
failure, and a schedule. Run before ``pyweft serve`` opens the same store."""

from __future__ import annotations

import asyncio
import sys

from pyweft import Engine

from .shop import IMPORTS, Order, checkout, many_steps, nightly


async def seed(url: str, *, steps: int = 40) -> None:
    async with Engine(url, workflows=[checkout, many_steps, nightly], queues=[IMPORTS]) as engine:
        done = await engine.start(many_steps, steps, id="long-run", tags=["batch"])
        await done.result(timeout=60)
        for i in range(3):
            await engine.start(checkout, Order(sku=f"sku-{i}", quantity=i + 1), id=f"order-{i}")
            await engine.set_attributes(f"order-{i}", {"region": "eu" if i == 0 else "us"})
        await engine.start(many_steps, -1, id="bad-run")  # completes at once with 0
        await engine.create_schedule("nightly-report", nightly, cron="0 3 * * *")


if __name__ == "__main__":
    asyncio.run(seed(sys.argv[1]))
