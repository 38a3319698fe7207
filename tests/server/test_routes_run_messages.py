"""What the run page's diff and message forms read over HTTP: a blocked run's drift in
its description, and a live run's handlers with their schemas, through the REST routes
and the HTTP client alike."""

from __future__ import annotations

import httpx

from pyweft import Engine, MemoryStorage, WorkflowContext, activity, workflow
from pyweft.client import Client
from support.poll import eventually

from .live import live_server

API = "/api/v1"


@activity
async def pack(box: str) -> str:
    return box


@activity
async def weigh(box: str, grams: int) -> int:
    return grams


def packing(drifted: bool) -> object:
    @workflow(name="packing")
    async def flow(ctx: WorkflowContext) -> str:
        if drifted:
            await ctx.run(weigh, "b1", 300)
        else:
            await ctx.run(pack, "b1")
        return str(await ctx.wait_for_signal("ship"))

    return flow


async def _blocked_run(storage: MemoryStorage) -> None:
    async with Engine(storage, workflows=[packing(False)]) as good:
        await good.start("packing", id="p")
        await eventually(lambda: _steps(good, "p", 1), what="step 1 recorded")


async def _steps(engine: Engine, workflow_id: str, count: int) -> bool:
    return len((await engine.history(workflow_id)).steps) >= count


async def test_a_blocked_runs_drift_is_in_its_description_over_rest_and_the_client() -> None:
    storage = MemoryStorage()
    await _blocked_run(storage)
    async with Engine(storage, workflows=[packing(True)]) as engine:
        await eventually(
            lambda: _status(engine, "p", "blocked"), what="blocked by the changed step 1"
        )
        async with live_server(engine) as url, Client(url) as client:
            async with httpx.AsyncClient(base_url=url) as raw:
                body = (await raw.get(f"{API}/workflows/p")).json()
            info = await client.describe("p")
            listed = (await client.list(status="blocked")).items
    assert body["drift"] == {
        "reason": "step_mismatch",
        "step": 1,
        "recorded": {"kind": "activity", "name": "pack", "args": None, "detail": "completed"},
        "requested": {"kind": "activity", "name": "weigh", "args": "(str, int)", "detail": None},
    }
    assert body["error"]["type"] == "NonDeterminismError"  # the text is still there
    assert info.drift is not None and info.drift == (await _local(storage)).drift
    assert [i.drift for i in listed] == [info.drift]


async def _local(storage: MemoryStorage) -> object:
    async with Engine(storage, role="client") as client:
        return await client.describe("p")


async def _status(engine: Engine, workflow_id: str, status: str) -> bool:
    return (await engine.describe(workflow_id)).status == status


async def test_a_live_runs_handlers_are_served_with_their_schemas(
    http: httpx.AsyncClient, engine: Engine
) -> None:
    await engine.start("waits_for_go", id="w")

    async def registered() -> bool:
        answer = await http.get(f"{API}/workflows/w/handlers")
        return answer.status_code == 200 and bool(answer.json()["signals"])

    await eventually(registered, what="the run's handlers")
    body = (await http.get(f"{API}/workflows/w/handlers")).json()
    assert body["workflow_id"] == "w"
    assert [(s["name"], s["waiting"]) for s in body["signals"]] == [("go", True)]
    (bump,) = body["updates"]
    assert bump["name"] == "bump" and bump["parameters"][0]["schema"] == {"type": "integer"}
    assert bump["input"]["prefixItems"] == [{"title": "n", "type": "integer"}]
    assert [q["name"] for q in body["queries"]] == ["seen"]
    async with live_server(engine) as url, Client(url) as client:
        found = await client.handlers("w")
    assert found == await engine.handlers("w")

    await engine.signal("w", "go", 1)
    await engine.result("w", timeout=5)
    finished = (await http.get(f"{API}/workflows/w/handlers")).json()
    assert finished["status"] == "completed" and finished["signals"] == []
    missing = await http.get(f"{API}/workflows/nope/handlers")
    assert missing.status_code == 404
