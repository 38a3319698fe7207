"""Event feeds over a real uvicorn server: SSE resume, filters, pings, WebSocket watch."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets

from pyweft import Engine
from support.poll import eventually

from .live import live_server

API = "/api/v1"


async def sse_items(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Parsed SSE messages: {"event", "id", "data"} (comments as {"comment": text})."""
    item: dict[str, Any] = {}
    async for line in resp.aiter_lines():
        if line == "":
            if item:
                yield item
            item = {}
        elif line.startswith(":"):
            yield {"comment": line[1:].strip()}
        else:
            name, _, value = line.partition(": ")
            item[name] = json.loads(value) if name == "data" else value


async def read_events(
    client: httpx.AsyncClient,
    url: str,
    count: int,
    headers: dict[str, str] | None = None,
    connected: asyncio.Event | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    async with client.stream("GET", url, headers=headers or {}) as resp:
        assert resp.status_code == 200
        async for item in sse_items(resp):
            if item.get("comment") == "connected" and connected is not None:
                connected.set()
            if item.get("event") == "event":
                out.append((item["id"], item["data"]))
                if len(out) == count:
                    break
    return out


async def start_runs(engine: Engine, prefix: str, n: int) -> None:
    for i in range(n):
        handle = await engine.start("add_three", i, id=f"{prefix}{i}")
        await handle.result(timeout=10)


async def test_sse_resume_after_a_dropped_connection_loses_and_repeats_nothing(
    engine: Engine,
) -> None:
    async with live_server(engine) as base, httpx.AsyncClient(base_url=base, timeout=30) as client:
        # Each add_three run makes 5 events (started, 3 steps, completed): 6 runs = 30.
        total = 30
        up = [asyncio.Event(), asyncio.Event()]
        reference = asyncio.create_task(
            read_events(client, f"{API}/events/sse", total, connected=up[0])
        )
        first = asyncio.create_task(read_events(client, f"{API}/events/sse", 7, connected=up[1]))
        await asyncio.gather(up[0].wait(), up[1].wait())
        await start_runs(engine, "a", 2)
        part1 = await first  # the connection is dropped here, mid-run-stream
        await start_runs(engine, "b", 4)  # events happen while nobody is connected as "first"
        last_id = part1[-1][0]
        part2 = await read_events(
            client, f"{API}/events/sse", total - len(part1), headers={"Last-Event-ID": last_id}
        )
        everything = await reference
    resumed = [cursor for cursor, _ in part1 + part2]
    assert resumed == [cursor for cursor, _ in everything]
    assert len(set(resumed)) == total
    assert [e["kind"] for _, e in everything][:5] == [
        "started",
        "step_completed",
        "step_completed",
        "step_completed",
        "completed",
    ]


async def test_sse_filters_by_run_and_kind_and_pings_when_idle(engine: Engine) -> None:
    async with (
        live_server(engine, ping_s=0.05) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        url = f"{API}/events/sse?workflow_id=keep&kind=completed"
        up = asyncio.Event()
        got = asyncio.create_task(read_events(client, url, 1, connected=up))
        await up.wait()
        pings = 0
        async with client.stream("GET", f"{API}/events/sse") as resp:
            async for item in sse_items(resp):
                if item.get("comment") == "ping":
                    pings += 1
                    if pings == 2:
                        break
        await start_runs(engine, "skip", 1)
        await start_runs(engine, "keep", 1)
        await engine.start("add_three", 1, id="keep")
        [(_, event)] = await got
    assert event["workflow_id"] == "keep" and event["kind"] == "completed"


async def test_run_feed_ends_after_the_terminal_event_and_404s_unknown_runs(
    engine: Engine,
) -> None:
    async with live_server(engine) as base, httpx.AsyncClient(base_url=base, timeout=30) as client:
        missing = await client.get(f"{API}/workflows/nope/events/sse")
        assert missing.status_code == 404
        handle = await engine.start("waits_for_go", id="w")
        kinds: list[str] = []

        async def follow() -> None:
            async with client.stream("GET", f"{API}/workflows/w/events/sse") as resp:
                async for item in sse_items(resp):
                    if item.get("event") == "event":
                        kinds.append(item["data"]["kind"])

        task = asyncio.create_task(follow())
        await eventually(lambda: "started" in kinds or task.done(), what="first event")
        await handle.signal("go", 1)
        await asyncio.wait_for(task, 10)  # the stream closed by itself
    assert kinds[-1] == "completed"
    assert "signal_received" in kinds


async def test_bad_cursor_is_400_before_streaming(engine: Engine) -> None:
    async with live_server(engine) as base, httpx.AsyncClient(base_url=base) as client:
        resp = await client.get(f"{API}/events/sse", headers={"Last-Event-ID": "garbage"})
        assert resp.status_code == 400
        assert resp.json()["error"]["code"] == "InvalidArgumentError"


async def test_websocket_watch_resumes_from_the_same_cursors(engine: Engine) -> None:
    async with live_server(engine) as base, httpx.AsyncClient(base_url=base, timeout=30) as client:
        ws_url = base.replace("http", "ws") + f"{API}/events/ws"
        up = asyncio.Event()
        sse = asyncio.create_task(read_events(client, f"{API}/events/sse", 10, connected=up))
        await up.wait()
        async with websockets.connect(ws_url) as ws:
            # The server pins the cursor before accepting, so connected means subscribed.
            await start_runs(engine, "r", 2)
            frames = [json.loads(await ws.recv()) for _ in range(3)]
        cursor = frames[-1]["cursor"]
        async with websockets.connect(ws_url + f"?cursor={cursor}") as ws:
            frames += [json.loads(await ws.recv()) for _ in range(7)]
        reference = await sse
    assert [f["cursor"] for f in frames] == [c for c, _ in reference]
    assert all(f["type"] == "event" for f in frames)


async def test_a_cursor_older_than_the_journal_gets_a_gap_notice_first(engine: Engine) -> None:
    from datetime import UTC, datetime

    from pyweft import WorkflowEvent
    from pyweft.server.feeds import EventJournal, FeedFilter

    journal = EventJournal(engine, capacity=3)
    for i in range(5):
        journal.append(
            WorkflowEvent(
                kind="started", workflow_id=f"w{i}", workflow_type="t", at=datetime.now(UTC)
            )
        )
    items = []
    async for item in journal.follow(FeedFilter(), journal.cursor(1), ping_s=0.01):
        items.append(item)
        if item.kind == "ping":
            break
    assert [i.kind for i in items] == ["gap", "event", "event", "event", "ping"]
    assert [i.data["workflow_id"] for i in items if i.kind == "event"] == ["w2", "w3", "w4"]
    items = []
    async for item in journal.follow(FeedFilter(), journal.cursor(2), ping_s=0.01):
        items.append(item)
        if item.kind == "ping":
            break
    assert [i.kind for i in items] == ["event", "event", "event", "ping"]  # nothing missed


async def test_websocket_needs_events_read_and_a_same_site_origin(engine: Engine) -> None:
    from websockets.exceptions import InvalidStatus

    from pyweft.server import ServerAuth
    from pyweft.server.keys import ApiKeyStore

    keys = ApiKeyStore(engine.storage)
    _, reader = await keys.create(subject="r", scopes=["events:read"])
    _, other = await keys.create(subject="o", scopes=["workflows:read"])
    async with live_server(engine, auth=ServerAuth()) as base:
        url = base.replace("http", "ws") + f"{API}/events/ws"

        async def refused(**kwargs: Any) -> int:
            """The HTTP status of a refused upgrade (closing before accepting is a 403)."""
            with pytest.raises(InvalidStatus) as caught:
                async with websockets.connect(url, **kwargs):
                    pass
            return caught.value.response.status_code

        assert await refused() == 403
        assert await refused(additional_headers={"Authorization": f"Bearer {other}"}) == 403
        assert (
            await refused(
                additional_headers={"Authorization": f"Bearer {reader}"},
                origin="https://evil.example",
            )
            == 403
        )
        async with websockets.connect(
            url, additional_headers={"Authorization": f"Bearer {reader}"}
        ) as ws:
            await start_runs(engine, "ok", 1)
            frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert frame["type"] == "event" and frame["event"]["workflow_id"] == "ok0"


async def test_feeds_of_one_run_are_capped_and_slots_come_back(engine: Engine) -> None:
    from contextlib import AsyncExitStack

    from websockets.exceptions import InvalidStatus

    await engine.start("waits_for_go", id="busy")
    async with (
        live_server(engine, max_streams_per_run=2) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        url = f"{API}/workflows/busy/events/sse"
        async with AsyncExitStack() as stack:
            for _ in range(2):
                resp = await stack.enter_async_context(client.stream("GET", url))
                assert resp.status_code == 200
            third = await client.get(url)
            assert third.status_code == 429
            assert third.json()["error"]["code"] == "RateLimitedError"
            ws_url = base.replace("http", "ws") + f"{API}/workflows/busy/watch"
            with pytest.raises(InvalidStatus):
                async with websockets.connect(ws_url):
                    pass
            other = await client.get(f"{API}/events/sse", params={"cursor": "bad"})
            assert other.status_code == 400  # other feeds are not counted against the run

        # Both streams closed: their slots are free again.
        async def reopened() -> bool:
            async with client.stream("GET", url) as resp:
                return resp.status_code == 200

        await eventually(reopened, what="a slot to come back")
