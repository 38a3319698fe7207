"""Durable locks and semaphores (ctx.lock): FIFO, no barging, leases, cancellation."""

from __future__ import annotations

import asyncio

from pyweft import Engine, MemoryStorage, VirtualClock, WorkflowContext, workflow
from support.backends import Backend
from support.poll import eventually

order: list[str] = []
gates: dict[str, asyncio.Event] = {}


@workflow(name="critical")
async def critical(ctx: WorkflowContext, who: str, permits: int = 1) -> str:
    async with ctx.lock("supplier-42", permits=permits, lease="1m"):
        order.append(f"in {who}")
        await ctx.wait_for_signal("leave")
        order.append(f"out {who}")
    return who


async def holders(engine: Engine) -> list[str]:
    return [h["workflow_id"] for h in (await engine.inspect_lock("supplier-42"))["holders"]]


async def waiters(engine: Engine) -> list[str]:
    return [w["workflow_id"] for w in (await engine.inspect_lock("supplier-42"))["waiters"]]


async def test_waiters_get_the_lock_in_arrival_order_without_barging() -> None:
    order.clear()
    async with Engine(MemoryStorage(), workflows=[critical], clock=VirtualClock()) as engine:
        await engine.start(critical, "a", id="a")
        await eventually(lambda: order == ["in a"])
        for who in ("b", "c", "d"):
            await engine.start(critical, who, id=who)
            await eventually(lambda w=who: _waiting(engine, w), what=f"{who} queued")
        assert await waiters(engine) == ["b", "c", "d"]
        for who, nxt in (("a", "b"), ("b", "c"), ("c", "d")):
            await engine.signal(who, "leave")
            assert await engine.get_handle(who).result(timeout=5) == who
            await eventually(lambda n=nxt: f"in {n}" in order, what=f"{nxt} enters")
        await engine.signal("d", "leave")
        await engine.get_handle("d").result(timeout=5)
        assert order == [f"{s} {w}" for w in "abcd" for s in ("in", "out")]
        assert await holders(engine) == [] and await waiters(engine) == []


_seen_waiting: dict[str, bool] = {}


def _waiting(engine: Engine, who: str) -> object:
    async def check() -> bool:
        return who in await waiters(engine)

    return check()


async def test_a_semaphore_admits_permits_runs_at_once() -> None:
    order.clear()
    async with Engine(MemoryStorage(), workflows=[critical], clock=VirtualClock()) as engine:
        for who in "abc":
            await engine.start(critical, who, 2, id=who)
        await eventually(lambda: sorted(order) == ["in a", "in b"])
        assert await waiters(engine) == ["c"]
        await engine.signal("b", "leave")
        await eventually(lambda: "in c" in order)
        for who in "ac":
            await engine.signal(who, "leave")
            await engine.get_handle(who).result(timeout=5)


async def test_a_cancelled_waiter_leaves_the_queue_and_a_cancelled_holder_releases() -> None:
    order.clear()
    async with Engine(MemoryStorage(), workflows=[critical], clock=VirtualClock()) as engine:
        await engine.start(critical, "a", id="a")
        await eventually(lambda: order == ["in a"])
        await engine.start(critical, "b", id="b")
        await engine.start(critical, "c", id="c")
        await eventually(lambda: _waiting(engine, "c"))
        await engine.cancel("b")  # a waiter
        await eventually(lambda: _gone(engine, "b"), what="b left the queue")
        await engine.cancel("a")  # the holder: its block exits, releasing
        await eventually(lambda: "in c" in order, what="c enters")
        assert await holders(engine) == ["c"]
        await engine.signal("c", "leave")
        assert await engine.get_handle("c").result(timeout=5) == "c"


def _gone(engine: Engine, who: str) -> object:
    async def check() -> bool:
        return who not in await waiters(engine)

    return check()


async def test_a_lock_whose_holder_stopped_renewing_is_reclaimed_after_its_lease() -> None:
    order.clear()
    store, clock = MemoryStorage(), VirtualClock()
    # An engine drives "a" into the lock and stops without releasing (as a dead one would).
    first = Engine(store, workflows=[critical], clock=clock, engine_id="first")
    await first.open()
    await first.start(critical, "a", id="a")
    await eventually(lambda: order == ["in a"])
    await first.shutdown()  # the run stays resumable; nothing renews its lease now
    async with Engine(store, workflows=[critical], clock=clock, recover=False) as second:
        await second.start(critical, "b", id="b")
        await eventually(lambda: _waiting(second, "b"))
        assert await holders(second) == ["a"]
        clock.advance(61)  # past a's lease: b reclaims the lock
        await eventually(lambda: "in b" in order, what="b reclaims")
        assert await holders(second) == ["b"]
        await second.signal("b", "leave")
        await second.get_handle("b").result(timeout=5)


async def test_a_restarted_engine_keeps_its_runs_lock_and_queue_place(backend: Backend) -> None:
    order.clear()
    async with backend.engine(workflows=[critical]) as engine:
        await engine.start(critical, "a", id="a")
        await eventually(lambda: order == ["in a"])
        await engine.start(critical, "b", id="b")
        await eventually(lambda: _waiting(engine, "b"))
    async with backend.engine(workflows=[critical]) as engine:  # replays both runs
        await eventually(lambda: _holds(engine, "a"), what="a still holds after replay")
        assert await waiters(engine) == ["b"]
        await engine.signal("a", "leave")
        assert await engine.get_handle("a").result(timeout=5) == "a"
        await eventually(lambda: order[-1] == "in b", what="b enters")
        await engine.signal("b", "leave")
        assert await engine.get_handle("b").result(timeout=5) == "b"
    # workflow code between steps runs again on replay: "in a" twice, "in b" once
    assert order == ["in a", "in a", "out a", "in b", "out b"]


def _holds(engine: Engine, who: str) -> object:
    async def check() -> bool:
        return await holders(engine) == [who]

    return check()
