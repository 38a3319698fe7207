"""The same behaviour through ``Engine`` (local) and ``Client`` over real uvicorn (remote).

Every test takes ``wf: WorkflowClient`` and must pass for both: the HTTP client offers
the engine's methods, returns the same records and raises the same typed errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from pyweft import (
    Engine,
    InvalidArgumentError,
    ResultTimeoutError,
    UpdateNotFoundError,
    WorkflowAlreadyExistsError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowNotRegisteredError,
    WorkflowTerminalError,
)
from pyweft.client import Client, WorkflowClient

from .conftest import add_three, waits_for_go
from .live import live_server


@pytest.fixture(params=["local", "remote"])
async def wf(request: pytest.FixtureRequest, engine: Engine) -> AsyncIterator[WorkflowClient]:
    if request.param == "local":
        yield engine
        return
    async with live_server(engine) as url, Client(url) as client:
        yield client


async def test_start_and_result_by_function_or_name(wf: WorkflowClient) -> None:
    handle = await wf.start(add_three, 1, id="a")
    assert handle.id == "a"
    assert await handle.result(timeout=10) == 4
    by_name = await wf.start("add_three", 10)
    assert await wf.result(by_name.id, timeout=10) == 13


async def test_id_conflicts_and_use_existing(wf: WorkflowClient) -> None:
    await wf.start(waits_for_go, id="dup")
    with pytest.raises(WorkflowAlreadyExistsError) as caught:
        await wf.start(waits_for_go, id="dup")
    assert caught.value.workflow_id == "dup"
    again = await wf.start(waits_for_go, id="dup", on_conflict="use_existing")
    assert again.id == "dup"


async def test_idempotency_key_returns_the_same_run(wf: WorkflowClient) -> None:
    first = await wf.start(add_three, 1, idempotency_key="k1")
    second = await wf.start(add_three, 1, idempotency_key="k1")
    assert first.id == second.id


async def test_unknown_ids_and_types_raise_typed_errors(wf: WorkflowClient) -> None:
    with pytest.raises(WorkflowNotFoundError) as caught:
        await wf.describe("missing")
    assert caught.value.workflow_id == "missing"
    with pytest.raises(WorkflowNotFoundError):
        await wf.signal("missing", "go", 1)
    with pytest.raises(WorkflowNotRegisteredError):
        await wf.start("no_such_workflow")
    with pytest.raises(InvalidArgumentError):
        await wf.start(add_three, 1, id="")


async def test_signal_query_update_round_trip(wf: WorkflowClient) -> None:
    handle = await wf.start(waits_for_go, id="w")
    assert await handle.update("bump", 3) == 3
    assert await wf.update("w", "bump", 2, idempotency_key="once") == 5
    assert await wf.update("w", "bump", 2, idempotency_key="once") == 5  # applied once
    assert await handle.query("seen") == 5
    await wf.signal("w", "go", {"n": 1}, signal_id="s1")
    assert await handle.result(timeout=10) == {"go": {"n": 1}}
    with pytest.raises(WorkflowTerminalError) as caught:
        await handle.signal("go", 2)
    assert caught.value.status == "completed"


async def test_failures_and_cancellation_come_back_typed(wf: WorkflowClient) -> None:
    failing = await wf.start("fails")
    with pytest.raises(WorkflowFailedError) as caught:
        await failing.result(timeout=10)
    assert caught.value.error_type == "ValueError"
    assert caught.value.workflow_id == failing.id
    waiting = await wf.start(waits_for_go)
    await waiting.cancel()
    with pytest.raises(WorkflowCancelledError):
        await waiting.result(timeout=10)
    assert (await waiting.describe()).status == "cancelled"


async def test_result_timeout_leaves_the_run_going(wf: WorkflowClient) -> None:
    handle = await wf.start(waits_for_go)
    with pytest.raises(ResultTimeoutError):
        await handle.result(timeout=0.05)
    await handle.signal("go", True)
    assert await handle.result(timeout=10) == {"go": True}


async def test_suspend_and_resume(wf: WorkflowClient) -> None:
    handle = await wf.start(waits_for_go)
    await wf.suspend(handle.id)
    assert (await wf.describe(handle.id)).status == "suspended"
    await wf.resume(handle.id)
    await handle.signal("go", 1)
    assert await handle.result(timeout=10) == {"go": 1}


async def test_list_pages_filters_and_aggregates(wf: WorkflowClient) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    for i in range(5):
        await wf.start(waits_for_go, id=f"p{i}", tags=["batch"])
        await wf.set_attributes(f"p{i}", {"n": i, "team": "blue"})
    done = await wf.start(add_three, 0, id="q0")
    await done.result(timeout=10)
    seen: list[str] = []
    cursor = None
    while True:
        page = await wf.list(id_prefix="p", tags=["batch"], limit=2, cursor=cursor)
        seen += [info.id for info in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(seen) == [f"p{i}" for i in range(5)]
    ranged = await wf.list(attributes={"n": {"gte": 3}}, created_after=before)
    assert sorted(i.id for i in ranged.items) == ["p3", "p4"]
    assert [i.id for i in (await wf.list(status="completed")).items] == ["q0"]
    groups = {g.key: g.count for g in await wf.aggregate(group_by="status")}
    assert groups == {"running": 5, "completed": 1}
    info = await wf.describe("p1")
    assert info.attributes == {"n": 1, "team": "blue"} and info.tags == ["batch"]
    assert isinstance(info.created_at, datetime)


async def test_history_lists_steps(wf: WorkflowClient) -> None:
    handle = await wf.start(add_three, 1)
    await handle.result(timeout=10)
    history = await handle.history()
    assert [s.name for s in history.steps] == ["add_one"] * 3
    assert history.steps[0].result == 2


async def test_run_events_end_with_the_terminal_event(wf: WorkflowClient) -> None:
    handle = await wf.start(waits_for_go, id="ev")
    kinds: list[str] = []
    # Local: subscribed from this call. Remote: the run's feed replays what the server holds.
    stream = handle.events()

    async def follow() -> None:
        async for event in stream:
            kinds.append(event.kind)

    task = asyncio.create_task(follow())
    await handle.signal("go", 1)
    await asyncio.wait_for(task, 10)
    assert kinds[-1] == "completed"


async def test_update_result_for_an_unknown_id(wf: WorkflowClient) -> None:
    assert isinstance(wf, Engine | Client)
    with pytest.raises(UpdateNotFoundError):
        await wf.update_result("nope", timeout=0.01)


async def test_update_timeout_then_update_result(wf: WorkflowClient) -> None:
    from pyweft import UpdateTimeoutError

    assert isinstance(wf, Engine | Client)
    handle = await wf.start(waits_for_go, id="u")
    assert await handle.update("bump", 1) == 1  # the handler is registered
    await wf.suspend("u")  # a suspended run answers nothing
    with pytest.raises(UpdateTimeoutError) as caught:
        await wf.update("u", "bump", 2, timeout=0.05)
    update_id = caught.value.update_id
    with pytest.raises(UpdateTimeoutError):
        await wf.update_result(update_id, timeout=0)
    await wf.resume("u")
    assert await wf.update_result(update_id, timeout=10) == 3


async def test_update_with_start_events_streams_and_debounce(wf: WorkflowClient) -> None:
    handle, answer = await wf.update_with_start(waits_for_go, update=("bump", 3), id="uws")
    assert handle.id == "uws" and answer == 3
    assert await wf.get_event("uws", "never-set", timeout=0.05) is None
    chunks = wf.read_stream("uws", "none")
    await handle.signal("go", 1)
    assert [c async for c in chunks] == []  # the run ended without writing it
    first = await wf.debounce("dk", add_three, 1, period="1h")
    second = await wf.debounce("dk", add_three, 2, period="1h")
    assert first.id == second.id
    assert (await second.describe()).status == "pending"
