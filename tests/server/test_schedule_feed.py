"""Schedule events reach the server's fleet feed (it follows ``engine.events()``)."""

from __future__ import annotations

import asyncio

import httpx

from pyweft import Engine

from .live import live_server
from .test_feeds import API, read_events


async def test_schedule_events_appear_on_the_fleet_sse_feed_filtered_by_kind(
    engine: Engine,
) -> None:
    async with live_server(engine) as base, httpx.AsyncClient(base_url=base, timeout=30) as client:
        up = asyncio.Event()
        url = f"{API}/events/sse?kind=schedule_created&kind=schedule_fired"
        reader = asyncio.create_task(read_events(client, url, 2, connected=up))
        await up.wait()
        await engine.create_schedule("feed", "add_three", 1, every="1d")
        run_id = await engine.schedules.trigger("feed")
        events = [data for _, data in await reader]
    assert [e["kind"] for e in events] == ["schedule_created", "schedule_fired"]
    assert events[0]["workflow_id"] == "" and events[0]["data"]["schedule_id"] == "feed"
    assert events[1]["workflow_id"] == run_id
    assert events[1]["data"]["how"] == "trigger" and events[1]["data"]["run_id"] == run_id
