"""HTTP routes for published events and streams, update-with-start and debounce."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from pyweft import Engine, MemoryStorage, WorkflowContext, workflow

API = "/api/v1"


@workflow
async def teller(ctx: WorkflowContext, words: list[str]) -> int:
    count = {"n": 0}

    def bump(by: int) -> int:
        count["n"] += by
        return count["n"]

    ctx.on_update("bump", bump)
    out = ctx.stream("words")
    for word in words:
        await out.write(word)
    await out.close()
    await ctx.set_event("told", {"words": len(words)})
    await ctx.wait_for_signal("end")
    return count["n"]


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    async with Engine(MemoryStorage(), workflows=[teller]) as eng:
        yield eng


def _chunks(text: str) -> list[tuple[str, str, str]]:
    """(event, id, data) of each SSE message that has an event line."""
    out = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            fields[name] = value
        if "event" in fields:
            out.append((fields["event"], fields.get("id", ""), fields.get("data", "")))
    return out


async def test_update_with_start_then_events_and_stream_over_http(http: httpx.AsyncClient) -> None:
    body: dict[str, Any] = {
        "type": "teller",
        "args": [["a", "b", "c"]],
        "id": "t",
        "update": "bump",
        "payload": 4,
    }
    resp = await http.post(f"{API}/workflows/update-with-start", json=body)
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"id": "t", "result": 4}
    event = await http.get(f"{API}/workflows/t/published/told?wait=5")
    assert event.json() == {"value": {"words": 3}}
    unset = await http.get(f"{API}/workflows/t/published/nothing")
    assert unset.json() == {"value": None}
    stream = await http.get(f"{API}/workflows/t/streams/words/sse")
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert _chunks(stream.text) == [
        ("chunk", "0", '"a"'),
        ("chunk", "1", '"b"'),
        ("chunk", "2", '"c"'),
        ("end", "", "{}"),
    ]
    resumed = await http.get(f"{API}/workflows/t/streams/words/sse", headers={"Last-Event-ID": "1"})
    assert [c[:2] for c in _chunks(resumed.text)] == [("chunk", "2"), ("end", "")]


async def test_debounce_and_bad_requests_over_http(http: httpx.AsyncClient) -> None:
    first = await http.post(
        f"{API}/workflows/debounce",
        json={"key": "k", "type": "teller", "args": [["x"]], "period": "1h"},
    )
    second = await http.post(
        f"{API}/workflows/debounce",
        json={"key": "k", "type": "teller", "args": [["y"]], "period": 3600},
    )
    assert first.status_code == second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    bad = await http.post(f"{API}/workflows/debounce", json={"key": "k", "type": "teller"})
    assert bad.status_code == 400 and "period" in bad.json()["error"]["message"]
    missing = await http.get(f"{API}/workflows/nope/streams/words/sse")
    assert missing.status_code == 404
    offset = await http.get(f"{API}/workflows/nope/streams/words/sse?from_offset=x")
    assert offset.status_code == 400
    no_id = await http.post(
        f"{API}/workflows/update-with-start", json={"type": "teller", "update": "bump"}
    )
    assert no_id.status_code == 400
