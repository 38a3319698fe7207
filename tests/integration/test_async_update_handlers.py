"""``async def`` update handlers: they run activities, sleep and wait with steps of their
own, answer their caller once, and are replayed from their own journal."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from pyweft import (
    Engine,
    UpdateFailedError,
    UpdateRejectedError,
    UpdateTimeoutError,
    WorkflowContext,
    activity,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

CALLS: list[str] = []


@activity
async def charge(item: str) -> str:
    CALLS.append(item)
    return f"charged {item}"


@activity
async def gate(item: str) -> str:
    """Parks until the test opens the gate for ``item``."""
    CALLS.append(item)
    await GATES.setdefault(item, asyncio.Event()).wait()
    return f"passed {item}"


GATES: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    CALLS.clear()
    GATES.clear()


@workflow
async def shop(ctx: WorkflowContext) -> dict[str, Any]:
    bought: list[str] = []
    done = False

    def positive(item: str) -> None:
        if not item:
            raise ValueError("an item needs a name")

    @ctx.on_update("buy", validator=positive)
    async def buy(item: str) -> str:
        receipt = await ctx.run(charge, item)
        await ctx.sleep(10)
        if item == "bad":
            raise ValueError("bad item")
        bought.append(item)
        return receipt

    @ctx.on_update("slow")
    async def slow(item: str) -> str:
        receipt = await ctx.run(gate, item)
        bought.append(item)
        return receipt

    @ctx.on_update("close")
    def close() -> None:
        nonlocal done
        done = True

    ctx.on_query("bought", lambda: list(bought))
    await ctx.wait_until(lambda: done)
    await ctx.all_handlers_finished()
    return {"bought": sorted(bought), "now": ctx.now().timestamp()}


async def _update(engine: Engine, wid: str, name: str, payload: Any, clock: Any) -> Any:
    """Send an update whose handler sleeps: move the virtual clock until it answers."""
    task = asyncio.create_task(engine.update(wid, name, payload, timeout=10))
    while not task.done():  # bounded by the update's own (real-time) timeout
        await asyncio.sleep(0.01)
        clock.advance(5)
    try:
        return await task
    except UpdateTimeoutError:
        keys = [k for k, _ in await engine._core.storage.scan("") if wid in k or "park" in k]
        raise AssertionError(f"no answer to {name} {payload!r}; stored keys: {keys}") from None


async def test_handler_runs_an_activity_and_answers(backend: Backend) -> None:
    async with backend.engine(workflows=[shop], activities=[charge, gate]) as engine:
        handle = await engine.start(shop, id="s1")
        assert await _update(engine, "s1", "buy", "tea", backend.clock) == "charged tea"
        await engine.update("s1", "close")
        result = await handle.result(timeout=5)
        assert result["bought"] == ["tea"]
        assert CALLS == ["tea"]
        kinds = [s.kind for s in await handle.history()]
        assert kinds.count("activity") == 1 and kinds.count("sleep") == 1
        # A query on the finished run replays the handler from its journal, writing nothing.
        assert await engine.query("s1", "bought") == ["tea"]
        assert CALLS == ["tea"]
        # A fork keeps the handler's journal with its application: nothing runs again.
        fork = await engine.fork("s1", id="s1-fork")
        assert (await fork.result(timeout=5))["bought"] == ["tea"]
        assert CALLS == ["tea"]


async def test_handlers_of_an_evicted_run_are_replayed_when_it_wakes(backend: Backend) -> None:
    async with backend.engine(
        workflows=[shop], activities=[charge, gate], max_cached_runs=0
    ) as engine:
        handle = await engine.start(shop, id="s7")
        assert await _update(engine, "s7", "buy", "tea", backend.clock) == "charged tea"
        assert await _update(engine, "s7", "buy", "jam", backend.clock) == "charged jam"
        await engine.update("s7", "close")
        assert (await handle.result(timeout=5))["bought"] == ["jam", "tea"]
        assert CALLS == ["tea", "jam"]


async def test_validator_rejection_writes_nothing(backend: Backend) -> None:
    async with backend.engine(workflows=[shop], activities=[charge, gate]) as engine:
        handle = await engine.start(shop, id="s2")
        before = await handle.history()
        with pytest.raises(UpdateRejectedError):
            await engine.update("s2", "buy", "", timeout=5)
        assert await handle.history() == before
        assert CALLS == []


async def test_handler_error_fails_only_the_update(backend: Backend) -> None:
    async with backend.engine(workflows=[shop], activities=[charge, gate]) as engine:
        handle = await engine.start(shop, id="s3")
        with pytest.raises(UpdateFailedError) as info:
            await _update(engine, "s3", "buy", "bad", backend.clock)
        assert info.value.error_type == "ValueError"
        assert await _update(engine, "s3", "buy", "jam", backend.clock) == "charged jam"
        await engine.update("s3", "close")
        assert (await handle.result(timeout=5))["bought"] == ["jam"]


async def test_two_handlers_run_concurrently_and_all_handlers_finished_waits(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[shop], activities=[charge, gate]) as engine:
        handle = await engine.start(shop, id="s4")
        first = asyncio.create_task(engine.update("s4", "slow", "a", timeout=10))
        second = asyncio.create_task(engine.update("s4", "slow", "b", timeout=10))
        await eventually(lambda: _called(["a", "b"]), what="both handlers run their activity")
        await engine.update("s4", "close")
        await asyncio.sleep(0.05)
        assert (await engine.describe("s4")).status == "running"  # all_handlers_finished holds
        GATES["b"].set()
        assert await second == "passed b"
        assert not first.done()
        GATES["a"].set()
        assert await first == "passed a"
        assert (await handle.result(timeout=5))["bought"] == ["a", "b"]


async def _called(expected: list[str]) -> bool:
    return sorted(CALLS) == expected and all(item in GATES for item in expected)


@workflow
async def hasty(ctx: WorkflowContext) -> str:
    @ctx.on_update("slow")
    async def slow(item: str) -> str:
        return await ctx.run(gate, item)

    await ctx.wait_for_signal("go")
    return "done"


async def test_finishing_with_handlers_running_warns(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    async with backend.engine(workflows=[hasty], activities=[gate]) as engine:
        handle = await engine.start(hasty, id="h1")
        events = handle.events()
        kinds: list[str] = []

        async def collect() -> None:
            async for event in events:
                kinds.append(event.kind)

        collector = asyncio.create_task(collect())
        waiting = asyncio.create_task(engine.update("h1", "slow", "x", timeout=10))
        await eventually(lambda: _called(["x"]), what="the handler runs its activity")
        with caplog.at_level(logging.WARNING, logger="pyweft.run"):
            await engine.signal("h1", "go")
            assert await handle.result(timeout=5) == "done"
        assert any("update handler(s) still running" in r.message for r in caplog.records)
        await asyncio.wait_for(collector, 5)
        assert "warning" in kinds
        with pytest.raises(Exception) as info:
            await waiting
        assert "WorkflowTerminal" in type(info.value).__name__ or "completed" in str(info.value)
        GATES["x"].set()


async def test_replay_after_restart_gives_the_same_state(backend: Backend) -> None:
    async with backend.engine(workflows=[shop], activities=[charge, gate]) as engine:
        await engine.start(shop, id="s5")
        assert await _update(engine, "s5", "buy", "tea", backend.clock) == "charged tea"
        assert await _update(engine, "s5", "buy", "jam", backend.clock) == "charged jam"
        assert await engine.query("s5", "bought") == ["tea", "jam"]
    async with backend.engine(workflows=[shop], activities=[charge, gate]) as engine:
        assert await engine.query("s5", "bought") == ["tea", "jam"]  # replayed, not re-run
        assert await _update(engine, "s5", "buy", "oil", backend.clock) == "charged oil"
        await engine.update("s5", "close")
        result = await engine.get_handle("s5").result(timeout=5)
    assert result["bought"] == ["jam", "oil", "tea"]
    assert CALLS == ["tea", "jam", "oil"]


async def test_a_handler_interrupted_by_a_restart_resumes_and_answers_once(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[shop], activities=[charge, gate]) as engine:
        await engine.start(shop, id="s6")
        task = asyncio.create_task(
            engine.update("s6", "buy", "tea", timeout=10, idempotency_key="k1")
        )
        # The activity ran and the sleep is open: the engine stops before the answer.
        await eventually(lambda: _charged(engine, "s6"), what="the handler's activity")
        assert not task.done()
        task.cancel()
    async with backend.engine(workflows=[shop], activities=[charge, gate]) as engine:
        backend.clock.advance(30)
        # The same idempotency key names the same update: its one answer, once resumed.
        again = await engine.update("s6", "buy", "tea", timeout=5, idempotency_key="k1")
        assert again == "charged tea"
        await engine.update("s6", "close")
        result = await engine.get_handle("s6").result(timeout=5)
    assert result["bought"] == ["tea"]
    assert CALLS == ["tea"]  # committed once, never run again


async def _charged(engine: Engine, wid: str) -> bool:
    return any(s.kind == "activity" for s in await engine.history(wid))


@workflow
async def vault(ctx: WorkflowContext) -> list[str]:
    unlocked = False
    log: list[str] = []

    @ctx.on_signal("unlock")
    def unlock() -> None:
        nonlocal unlocked
        unlocked = True

    @ctx.on_update("open")
    async def open_(who: str) -> str:
        await ctx.wait_until(lambda: unlocked)  # a handler's own condition step
        log.append(who)
        return f"opened for {who}"

    await ctx.wait_for_signal("done")
    await ctx.all_handlers_finished()
    return log


async def test_a_handler_waits_for_state_a_signal_handler_changes(backend: Backend) -> None:
    async with backend.engine(workflows=[vault]) as engine:
        await engine.start(vault, id="v1")
        waiting = asyncio.create_task(engine.update("v1", "open", "ann", timeout=10))
        await eventually(lambda: _taken(engine, "v1"), what="the run took the update")
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await engine.signal("v1", "unlock")
        assert await waiting == "opened for ann"
    async with backend.engine(workflows=[vault]) as engine:  # replayed after a restart
        await engine.signal("v1", "done")
        assert await engine.get_handle("v1").result(timeout=5) == ["ann"]


async def _taken(engine: Engine, wid: str) -> bool:
    """The request is gone from the run's queue: its application is recorded."""
    from pyweft.engine.replay import keys

    storage = engine._core.storage
    return not await storage.scan(keys.update_prefix(wid))


def _counter(async_handler: bool) -> object:
    @workflow(name="counter")
    async def counter(ctx: WorkflowContext) -> int:
        total = 0

        def add_plain(n: int) -> int:
            nonlocal total
            total += n
            return total

        async def add_async(n: int) -> int:
            return add_plain(n)

        ctx.on_update("add", add_async if async_handler else add_plain)
        await ctx.wait_for_signal("stop")
        return total

    return counter


async def test_switching_a_recorded_handler_between_plain_and_async_blocks_the_run(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[_counter(False)]) as engine:
        await engine.start("counter", id="c1")
        assert await engine.update("c1", "add", 2, timeout=5) == 2
    async with backend.engine(workflows=[_counter(True)]) as engine:
        await eventually(lambda: _blocked(engine, "c1"), what="the drifted run is blocked")
        info = await engine.describe("c1")
        assert info.error is not None and "async def" in info.error.message


async def _blocked(engine: Engine, wid: str) -> bool:
    return (await engine.describe(wid)).status == "blocked"
