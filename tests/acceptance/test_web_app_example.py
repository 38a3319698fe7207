"""examples/fastapi_app.py, driven over HTTP with httpx's ASGI transport, on a real SQLite file.

The guide docs/guides/web-apps.md shows the same code; a test pins that too.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fastapi_app.py"
GUIDE = ROOT / "docs" / "guides" / "web-apps.md"


@pytest.fixture(scope="module")
def shop() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fastapi_app_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' annotations through it
    spec.loader.exec_module(module)
    return module


@asynccontextmanager
async def serving(shop: ModuleType, db: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan run, as a server runs it, and a client talking to it."""
    app = shop.create_app(f"sqlite:///{db}")
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


def engine_of(client: httpx.AsyncClient) -> Any:
    return client.app.state.engine  # type: ignore[attr-defined]


def events_of(body: str) -> list[tuple[str, Any]]:
    found = []
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        found.append((fields["event"], json.loads(fields["data"])))
    return found


async def test_a_small_order_is_placed_and_its_shipment_awaited_over_http(
    shop: ModuleType, tmp_path: Path
) -> None:
    async with serving(shop, tmp_path / "shop.db") as client:
        placed = await client.post("/orders", json={"id": "o-1", "cents": 500})
        assert placed.status_code == 202
        assert placed.json() == {"workflow_id": "order-o-1", "events": "/orders/o-1/events"}
        done = await client.get("/orders/o-1", params={"wait": 10})
        assert done.status_code == 200
        assert done.json() == {
            "order_id": "o-1",
            "receipt": "rcpt-o-1-500",
            "tracking": "trk-o-1",
            "approved_by": None,
        }
        again = await client.post("/orders", json={"id": "o-1", "cents": 500})
        assert again.status_code == 202 and again.json()["workflow_id"] == "order-o-1"


async def test_bad_requests_get_clear_http_errors_and_start_nothing(
    shop: ModuleType, tmp_path: Path
) -> None:
    async with serving(shop, tmp_path / "shop.db") as client:
        assert (
            await client.post("/orders", json={"id": "o-1", "cents": "lots"})
        ).status_code == 422
        assert (await client.get("/orders/o-1", params={"wait": -1})).status_code == 422
        missing = await client.get("/orders/nope")
        assert missing.status_code == 404 and "no order 'nope'" in missing.json()["detail"]
        assert (await client.get("/orders/nope/events")).status_code == 404
        assert (await client.post("/orders/nope/approve?approver=ann")).status_code == 404
        assert (await engine_of(client).list()).items == []


async def test_a_large_order_waits_for_approval_and_the_event_stream_follows_it_to_the_end(
    shop: ModuleType, tmp_path: Path
) -> None:
    async with serving(shop, tmp_path / "shop.db") as client:
        await client.post("/orders", json={"id": "big", "cents": 250_00})
        waiting = await client.get("/orders/big", params={"wait": 0})
        assert waiting.status_code == 202 and waiting.json() == {"status": "running"}
        # The transport hands the body over when the stream ends, after the run's last step;
        # test_the_progress_stream_shows_a_wait_then_each_step_as_it_lands shows it live.
        stream = asyncio.create_task(client.get("/orders/big/events"))
        approved = await client.post("/orders/big/approve", params={"approver": "ann"})
        assert approved.status_code == 204
        response = await asyncio.wait_for(stream, timeout=30)
        assert response.headers["content-type"].startswith("text/event-stream")
        events = events_of(response.text)
        steps = [
            (data["step"], data["kind"], data["name"]) for kind, data in events if kind == "step"
        ]
        assert steps == [
            (1, "activity", "charge"),
            (2, "signal", "approve"),
            (3, "activity", "ship"),
        ]
        shipment = {"order_id": "big", "receipt": "rcpt-big-25000", "tracking": "trk-big"}
        assert events[-1] == ("completed", {**shipment, "approved_by": "ann"})
        again = await client.post("/orders/big/approve", params={"approver": "bob"})
        assert again.status_code == 409


async def test_the_progress_stream_shows_a_wait_then_each_step_as_it_lands(
    shop: ModuleType, tmp_path: Path
) -> None:
    async with serving(shop, tmp_path / "shop.db") as client:
        await client.post("/orders", json={"id": "big", "cents": 250_00})
        progress = shop.progress(shop.order_handle(engine_of(client), "big"))
        first = [events_of(await anext(progress))[0] for _ in range(2)]
        assert first == [
            ("step", {"step": 1, "kind": "activity", "name": "charge"}),
            ("waiting", {"step": 2, "kind": "signal", "name": "approve"}),
        ]
        await client.post("/orders/big/approve", params={"approver": "ann"})
        rest = [events_of(chunk)[0] async for chunk in progress]
        assert [kind for kind, _ in rest] == ["step", "step", "completed"]
        assert rest[-1][1]["approved_by"] == "ann"


async def test_an_order_waiting_when_the_app_stops_completes_after_a_restart(
    shop: ModuleType, tmp_path: Path
) -> None:
    db = tmp_path / "shop.db"
    async with serving(shop, db) as client:
        await client.post("/orders", json={"id": "big", "cents": 250_00})
    async with serving(shop, db) as client:
        await client.post("/orders/big/approve", params={"approver": "ann"})
        done = await client.get("/orders/big", params={"wait": 10})
        assert done.status_code == 200 and done.json()["approved_by"] == "ann"
        late = events_of((await client.get("/orders/big/events")).text)
        assert [kind for kind, _ in late] == ["step", "step", "step", "completed"]


def test_the_guide_shows_the_example_as_it_is_tested() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(), re.S | re.M)
    assert EXAMPLE.read_text() in blocks
