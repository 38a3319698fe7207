"""Helpers for schedule tests: move a VirtualClock and let the engine catch up."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from pyweft import Engine, VirtualClock


def at(text: str) -> float:
    """Epoch seconds of an ISO time ('2026-03-29T00:30:00+01:00' or naive = UTC)."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


async def settle(engine: Engine) -> None:
    """Let every task the engine started run until the schedule loop is idle."""
    for _ in range(3):
        for _ in range(20):
            await asyncio.sleep(0)
        await engine.schedules.firing.idle()


async def advance(engine: Engine, clock: VirtualClock, seconds: float, step: float = 1.0) -> None:
    """Move time forward in ``step``s, letting the engine work after each one."""
    end = clock.now() + seconds
    await settle(engine)
    while clock.now() < end:
        clock.advance_to(min(end, clock.now() + step))
        await settle(engine)
