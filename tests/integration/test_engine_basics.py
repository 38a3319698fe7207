"""Starting runs, activities, results and restarts, on memory and SQLite."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from pyweft import (
    Engine,
    WorkflowAlreadyExistsError,
    WorkflowContext,
    activity,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

calls: dict[str, int] = {}


def bump(name: str) -> None:
    calls[name] = calls.get(name, 0) + 1


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    calls.clear()


@activity
async def add(a: int, b: int) -> int:
    bump("add")
    return a + b


@activity
def blocking_double(x: int) -> int:
    bump("double")
    assert threading.current_thread().name.startswith("pyweft-activity")
    return x * 2


@activity(name="greet")
async def greet_activity(name: str) -> str:
    bump("greet")
    return f"hello {name}"


@workflow
async def arithmetic(ctx: WorkflowContext, a: int, b: int) -> int:
    total = await ctx.run(add, a, b)
    return await ctx.run(blocking_double, total)


@workflow
async def by_name(ctx: WorkflowContext, who: str) -> str:
    return str(await ctx.run("greet", who))


@dataclass
class Order:
    id: int
    amount: Decimal
    placed: datetime


@activity
async def price(order: Order) -> Order:
    return Order(id=order.id, amount=order.amount * 2, placed=order.placed)


@workflow
async def typed(ctx: WorkflowContext, order: Order) -> Order:
    doubled = await ctx.run(price, order)
    assert isinstance(doubled, Order)
    return doubled


@workflow
async def napper(ctx: WorkflowContext, seconds: float) -> str:
    await ctx.run(add, 1, 1)
    await ctx.sleep(seconds)
    await ctx.run(add, 2, 2)
    return "rested"


async def test_workflow_with_async_and_sync_activities_returns_its_value(backend: Backend) -> None:
    async with backend.engine(workflows=[arithmetic]) as engine:
        handle = await engine.start(arithmetic, 2, 3)
        assert await handle.result(timeout=5) == 10
        info = await handle.describe()
    assert info.status == "completed"
    assert info.step_count == 2
    assert info.result == 10
    assert calls == {"add": 1, "double": 1}


async def test_activity_called_by_registered_name(backend: Backend) -> None:
    async with backend.engine(workflows=[by_name], activities=[greet_activity]) as engine:
        assert await (await engine.start(by_name, "ada")).result(timeout=5) == "hello ada"


async def test_workflow_own_activity_wins_over_engine_registry(backend: Backend) -> None:
    @activity(name="greet")
    async def local_greet(name: str) -> str:
        return f"hi {name} (local)"

    @workflow(name="local_by_name", activities=[local_greet])
    async def local_by_name(ctx: WorkflowContext, who: str) -> str:
        return str(await ctx.run("greet", who))

    async with backend.engine(
        workflows=[local_by_name, by_name], activities=[greet_activity]
    ) as engine:
        assert await (await engine.start(local_by_name, "bo")).result(timeout=5) == "hi bo (local)"
        assert await (await engine.start(by_name, "bo")).result(timeout=5) == "hello bo"


async def test_arguments_and_results_decode_to_annotated_types(backend: Backend) -> None:
    order = Order(id=7, amount=Decimal("19.99"), placed=datetime(2026, 1, 2, tzinfo=UTC))
    async with backend.engine(workflows=[typed]) as engine:
        result = await (await engine.start(typed, order)).result(timeout=5)
    assert result == Order(id=7, amount=Decimal("39.98"), placed=order.placed)


async def test_sleep_waits_for_the_clock(backend: Backend) -> None:
    async with backend.engine(workflows=[napper]) as engine:
        handle = await engine.start(napper, 3600)
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep armed")
        assert (await handle.describe()).status == "running"
        backend.clock.advance(3599)
        await asyncio.sleep(0.01)
        assert (await handle.describe()).status == "running"
        backend.clock.advance(1)
        assert await handle.result(timeout=5) == "rested"


async def test_restart_resumes_sleep_without_repeating_completed_steps(backend: Backend) -> None:
    async with backend.engine(workflows=[napper]) as engine:
        handle = await engine.start(napper, 60, id="nap-1")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep armed")
    assert calls == {"add": 1}
    backend.clock.advance(120)  # the deadline passes while no engine runs
    async with backend.engine(workflows=[napper]) as engine:
        assert await engine.get_handle("nap-1").result(timeout=5) == "rested"
    assert calls == {"add": 2}  # the first activity did not run again
    assert handle.id == "nap-1"


async def test_restart_keeps_the_original_sleep_deadline(backend: Backend) -> None:
    async with backend.engine(workflows=[napper]) as engine:
        await engine.start(napper, 100, id="nap-2")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep armed")
    backend.clock.advance(60)
    async with backend.engine(workflows=[napper]) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep re-armed")
        assert backend.clock.next_deadline() == pytest.approx(backend.clock.now() + 40)
        backend.clock.advance(40)
        assert await engine.get_handle("nap-2").result(timeout=5) == "rested"


async def test_recover_false_leaves_runs_alone(backend: Backend) -> None:
    async with backend.engine(workflows=[napper]) as engine:
        await engine.start(napper, 10, id="nap-3")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep armed")
    async with backend.engine(workflows=[napper], recover=False) as engine:
        assert not engine.is_running_here("nap-3")
        assert (await engine.describe("nap-3")).status == "running"
        assert await engine.recover_all() == 1
        backend.clock.advance(10)
        assert await engine.get_handle("nap-3").result(timeout=5) == "rested"


async def test_duplicate_id_fails_or_returns_the_existing_run(backend: Backend) -> None:
    async with backend.engine(workflows=[arithmetic]) as engine:
        first = await engine.start(arithmetic, 1, 1, id="dup")
        with pytest.raises(WorkflowAlreadyExistsError) as err:
            await engine.start(arithmetic, 5, 5, id="dup")
        assert err.value.code == "WorkflowAlreadyExistsError"
        again = await engine.start(arithmetic, 5, 5, id="dup", on_conflict="use_existing")
        assert again.id == first.id
        assert await again.result(timeout=5) == 4


async def test_idempotency_key_creates_one_run(backend: Backend) -> None:
    async with backend.engine(workflows=[arithmetic]) as engine:
        handles = await asyncio.gather(
            *(engine.start(arithmetic, 1, 2, idempotency_key="order-9") for _ in range(10))
        )
        assert len({h.id for h in handles}) == 1
        assert await handles[0].result(timeout=5) == 6
        page = await engine.list(workflow_type="arithmetic")
        assert len(page.items) == 1
    assert calls == {"add": 1, "double": 1}


async def test_list_pages_newest_first_with_filters(backend: Backend) -> None:
    async with backend.engine(workflows=[arithmetic, napper]) as engine:
        for i in range(5):
            await (await engine.start(arithmetic, i, i, id=f"a{i}")).result(timeout=5)
            backend.clock.advance(1)
        await engine.start(napper, 50, id="sleeper")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep armed")

        page1 = await engine.list(workflow_type="arithmetic", limit=2)
        assert [i.id for i in page1.items] == ["a4", "a3"]
        page2 = await engine.list(workflow_type="arithmetic", limit=2, cursor=page1.next_cursor)
        assert [i.id for i in page2.items] == ["a2", "a1"]
        page3 = await engine.list(workflow_type="arithmetic", limit=2, cursor=page2.next_cursor)
        assert [i.id for i in page3.items] == ["a0"]
        assert page3.next_cursor is None

        running = await engine.list(status="running")
        assert [i.id for i in running.items] == ["sleeper"]
        done = await engine.list(status="completed", workflow_type="arithmetic")
        assert len(done.items) == 5
        assert len((await engine.list()).items) == 6


async def test_engine_without_storage_uses_pyweft_database_url(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"{tmp_path}/env.db"
    monkeypatch.setenv("PYWEFT_DATABASE_URL", f"sqlite:///{db}")
    async with Engine(workflows=[arithmetic]) as engine:
        assert await (await engine.start(arithmetic, 1, 1)).result(timeout=5) == 4
    assert Path(db).exists()  # noqa: ASYNC240
