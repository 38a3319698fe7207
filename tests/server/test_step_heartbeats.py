"""Heartbeat progress of a running activity through the REST history route and the
HTTP client: the step's latest heartbeat details and when they were stored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from pyweft import Engine, MemoryStorage, WorkflowContext, activity, activity_context, workflow
from pyweft.client import Client
from pyweft.server import create_app
from pyweft.server.app import API_PREFIX
from support.poll import eventually

from .live import live_server

release = asyncio.Event()


@activity
async def copy_files() -> int:
    activity_context().heartbeat({"copied": 3, "of": 10})
    await release.wait()
    return 10


@workflow
async def copying(ctx: WorkflowContext) -> int:
    return await ctx.run(copy_files)


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    release.clear()
    async with Engine(MemoryStorage(), workflows=[copying]) as eng:
        yield eng
        release.set()


async def test_history_carries_the_running_activitys_heartbeat_details(engine: Engine) -> None:
    app = create_app(engine)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as http:
        await engine.start(copying, id="copy-1")

        async def open_step() -> dict[str, object] | None:
            r = await http.get(f"{API_PREFIX}/workflows/copy-1/history")
            steps = r.json()["steps"]
            return steps[0] if steps and steps[0]["heartbeat_details"] else None

        await eventually(open_step, what="the heartbeat stored")
        step = await open_step()
        assert step is not None
        assert step["status"] == "open"
        assert step["heartbeat_details"] == {"copied": 3, "of": 10}
        assert isinstance(step["heartbeat_at"], str)

        release.set()
        await engine.get_handle("copy-1").result(timeout=5)
        done = (await http.get(f"{API_PREFIX}/workflows/copy-1/history")).json()["steps"][0]
        assert done["status"] == "completed"
        assert done["heartbeat_details"] is None and done["heartbeat_at"] is None


async def test_the_http_client_reads_heartbeat_details_as_the_engine_does(engine: Engine) -> None:
    await engine.start(copying, id="copy-2")

    async def stored() -> bool:
        steps = (await engine.history("copy-2")).steps
        return bool(steps and steps[0].heartbeat_details)

    await eventually(stored, what="the heartbeat stored")
    local = (await engine.history("copy-2")).steps[0]
    async with live_server(engine) as url, Client(url) as client:
        remote = (await client.history("copy-2")).steps[0]
    assert remote.heartbeat_details == local.heartbeat_details == {"copied": 3, "of": 10}
    assert remote.heartbeat_at == local.heartbeat_at
