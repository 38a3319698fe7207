"""REST routes for workflow queues, workers (list, drain, resume) and activity queues,
against a real engine and a real in-process Worker sharing its store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from pyweft import (
    Engine,
    InvalidArgumentError,
    MemoryStorage,
    Queue,
    QueueNotFoundError,
    SystemClock,
    VirtualClock,
    Worker,
    WorkflowContext,
    activity,
    workflow,
)
from pyweft.client import Client
from pyweft.server import ServerAuth, create_app
from pyweft.server.app import API_PREFIX
from pyweft.server.keys import ApiKeyStore
from server.conftest import WORKFLOWS, waits_for_go
from support.poll import eventually

from .live import live_server

IMPORTS = Queue("imports", concurrency=1, rate_limit=(50, "30s"))


@activity(queue="media")
async def shrink(x: int) -> int:
    return x // 2


@workflow
async def halves(ctx: WorkflowContext, x: int) -> int:
    return await ctx.run(shrink, x)


@pytest.fixture
async def setup() -> AsyncIterator[tuple[Engine, MemoryStorage, httpx.AsyncClient]]:
    storage = MemoryStorage()
    async with Engine(
        storage,
        workflows=[*WORKFLOWS, halves],
        activities=[shrink],
        queues=[IMPORTS],
        serve_queues=["default"],
        clock=SystemClock(),
        poll_interval=0.05,
    ) as eng:
        app = create_app(eng, auth=ServerAuth())
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://testserver"
        )
        try:
            yield eng, storage, client
        finally:
            await client.aclose()
            await lifespan.__aexit__(None, None, None)


async def _key(eng: Engine, *scopes: str) -> dict[str, str]:
    _, token = await ApiKeyStore(eng.storage).create(subject="t", scopes=list(scopes))
    return {"Authorization": f"Bearer {token}"}


async def test_queue_listing_shows_depth_in_flight_and_limits(
    setup: tuple[Engine, MemoryStorage, httpx.AsyncClient],
) -> None:
    eng, _, client = setup
    hdr = await _key(eng, "workflows:read")
    for i in range(3):
        await eng.enqueue(IMPORTS, waits_for_go, id=f"q{i}")

    async def settled() -> bool:
        r = await client.get(f"{API_PREFIX}/queues/imports", headers=hdr)
        return bool(r.json()["in_flight"] == 1 and r.json()["depth"] == 2)

    await eventually(settled, what="one run dispatched, two waiting")
    one = (await client.get(f"{API_PREFIX}/queues/imports", headers=hdr)).json()
    assert one["concurrency"] == 1 and one["rate_limit"] == [50, 30.0]
    assert one["oldest_wait_s"] is not None and one["oldest_wait_s"] >= 0
    listed = (await client.get(f"{API_PREFIX}/queues", headers=hdr)).json()["items"]
    assert [q["name"] for q in listed] == ["imports"]
    assert listed[0]["depth"] == 2


async def test_unknown_queue_is_404_and_bad_parameters_400(
    setup: tuple[Engine, MemoryStorage, httpx.AsyncClient],
) -> None:
    eng, _, client = setup
    hdr = await _key(eng, "system:read")
    r = await client.get(f"{API_PREFIX}/queues/nope", headers=hdr)
    assert r.status_code == 404 and r.json()["error"]["code"] == "QueueNotFoundError"
    r = await client.get(f"{API_PREFIX}/queues/{'x' * 300}", headers=hdr)
    assert r.status_code == 400
    r = await client.get(f"{API_PREFIX}/workers?include_gone=maybe", headers=hdr)
    assert r.status_code == 400 and "include_gone" in r.json()["error"]["message"]
    r = await client.get(f"{API_PREFIX}/workers?limit=3", headers=hdr)
    assert r.status_code == 400 and "limit" in r.json()["error"]["message"]


async def test_drain_and_resume_a_live_worker(
    setup: tuple[Engine, MemoryStorage, httpx.AsyncClient],
) -> None:
    eng, storage, client = setup
    read = await _key(eng, "system:read")
    write = await _key(eng, "workers:write")
    async with Worker(
        storage,
        activities=[shrink],
        queues=["media"],
        worker_id="w-1",
        concurrency=3,
        poll_interval=0.05,
    ) as w:
        [row] = (await client.get(f"{API_PREFIX}/workers", headers=read)).json()["items"]
        assert (row["id"], row["status"], row["queues"], row["concurrency"]) == (
            "w-1",
            "active",
            ["media"],
            3,
        )
        assert row["last_heartbeat"] and row["in_flight"] == 0
        # Reading is not enough to drain.
        r = await client.post(f"{API_PREFIX}/workers/w-1/drain", headers=read)
        assert r.status_code == 403
        r = await client.post(f"{API_PREFIX}/workers/w-1/drain", headers=write)
        assert r.status_code == 200 and r.json()["drain_requested"] is True
        await w.heartbeat()
        assert w.draining
        [row] = (await client.get(f"{API_PREFIX}/workers", headers=read)).json()["items"]
        assert row["status"] == "drained" and row["drain_requested"] is True
        r = await client.post(f"{API_PREFIX}/workers/w-1/resume", headers=write)
        assert r.status_code == 200 and r.json()["drain_requested"] is False
        await w.heartbeat()
        assert not w.draining
        [row] = (await client.get(f"{API_PREFIX}/workers", headers=read)).json()["items"]
        assert row["status"] == "active" and row["drain_requested"] is False
        aq = (await client.get(f"{API_PREFIX}/activity-queues", headers=read)).json()["items"]
        assert aq == [
            {
                "queue": "media",
                "waiting": 0,
                "oldest_waiting_s": None,
                "workers": 1,
                "draining": 0,
                "slots": 3,
                "in_flight": 0,
                "concurrency_limit": None,
                "rate_limit": None,
            }
        ]
        await eng.set_activity_queue_limits("media", concurrency=2, rate_limit=(10, "1m"))
        [aq1] = (await client.get(f"{API_PREFIX}/activity-queues", headers=read)).json()["items"]
        assert aq1["concurrency_limit"] == 2 and aq1["rate_limit"] == [10, 60.0]


async def test_draining_an_unknown_worker_is_refused_and_stores_nothing(
    setup: tuple[Engine, MemoryStorage, httpx.AsyncClient],
) -> None:
    eng, storage, client = setup
    write = await _key(eng, "workers:write")
    before = await storage.scan("tk:")
    r = await client.post(f"{API_PREFIX}/workers/ghost/drain", headers=write)
    assert r.status_code == 400 and r.json()["error"]["code"] == "InvalidArgumentError"
    assert "no worker 'ghost'" in r.json()["error"]["message"]
    assert await storage.scan("tk:") == before


async def test_the_http_client_returns_what_the_engine_returns(
    setup: tuple[Engine, MemoryStorage, httpx.AsyncClient],
) -> None:
    eng, storage, _ = setup
    await eng.enqueue(IMPORTS, waits_for_go, id="c0")
    async with (
        Worker(storage, activities=[shrink], queues=["media"], worker_id="w-2") as w,
        live_server(eng) as url,
        Client(url) as client,
    ):
        assert await client.queues() == await eng.queues()
        assert await client.queue_info("imports") == await eng.queue_info("imports")
        with pytest.raises(QueueNotFoundError):
            await client.queue_info("nope")
        assert await client.workers() == await eng.workers()
        drained = await client.drain_worker("w-2")
        assert drained is not None and drained.drain_requested
        await w.heartbeat()
        [info] = await client.workers()
        assert info == (await eng.workers())[0] and info.status == "drained"
        resumed = await client.resume_worker("w-2")
        assert resumed is not None and not resumed.drain_requested
        with pytest.raises(InvalidArgumentError, match="no worker 'ghost'"):
            await client.drain_worker("ghost")
        with pytest.raises(InvalidArgumentError, match="no worker 'ghost'"):
            await eng.drain_worker("ghost")


async def test_the_blocking_client_drains_and_lists_workers(
    setup: tuple[Engine, MemoryStorage, httpx.AsyncClient],
) -> None:
    from pyweft.sync import Client as SyncClient

    eng, storage, _ = setup

    def blocking(url: str) -> tuple[list[str], bool, list[str]]:
        with SyncClient(url) as client:
            ids = [w.id for w in client.workers()]
            drained = client.drain_worker("w-3")
            return ids, bool(drained and drained.drain_requested), [q.name for q in client.queues()]

    async with (
        Worker(storage, activities=[shrink], queues=["media"], worker_id="w-3"),
        live_server(eng) as url,
    ):
        assert await asyncio.to_thread(blocking, url) == (["w-3"], True, ["imports"])
        [info] = await eng.workers()
        assert info.drain_requested


async def test_gone_workers_are_listed_only_when_asked(
    setup: tuple[Engine, MemoryStorage, httpx.AsyncClient],
) -> None:
    eng, storage, client = setup
    read = await _key(eng, "workflows:read")
    # A worker whose clock is an hour behind wrote a record that is already overdue.
    stale = VirtualClock(time.time() - 3600)
    async with Worker(storage, activities=[shrink], queues=["media"], worker_id="old", clock=stale):
        live = (await client.get(f"{API_PREFIX}/workers", headers=read)).json()["items"]
        assert live == []
        r = await client.get(f"{API_PREFIX}/workers?include_gone=true", headers=read)
        [row] = r.json()["items"]
        assert (row["id"], row["status"]) == ("old", "gone")
        aq = (await client.get(f"{API_PREFIX}/activity-queues", headers=read)).json()["items"]
        assert aq == []  # a gone worker serves nothing


async def test_an_activity_queue_nobody_serves_shows_its_waiting_tasks(
    setup: tuple[Engine, MemoryStorage, httpx.AsyncClient],
) -> None:
    eng, storage, client = setup
    read = await _key(eng, "workflows:read")
    handle = await eng.start(halves, 8)

    async def waiting() -> list[dict[str, object]]:
        r = await client.get(f"{API_PREFIX}/activity-queues", headers=read)
        items: list[dict[str, object]] = r.json()["items"]
        return items

    await eventually(lambda: _one_waiting(waiting), what="the task listed")
    [row] = await waiting()
    assert (row["queue"], row["waiting"], row["workers"], row["slots"]) == ("media", 1, 0, 0)
    assert isinstance(row["oldest_waiting_s"], float)
    async with Worker(storage, activities=[shrink], queues=["media"]):
        assert await handle.result(timeout=10) == 4


async def _one_waiting(fetch: Any) -> bool:
    return [r["waiting"] for r in await fetch()] == [1]
