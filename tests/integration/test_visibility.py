"""Search attributes, filtered listing, aggregates, fork, versioning, retention."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pyweft import (
    IdempotencyKeySpentError,
    InvalidArgumentError,
    VersionMismatchError,
    WorkflowContext,
    WorkflowFailedError,
    activity,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

T0 = datetime(2030, 1, 1, tzinfo=UTC)


@activity
async def noop(x: int) -> int:
    return x


@workflow
async def tagged(ctx: WorkflowContext, region: str, amount: float) -> str:
    ctx.set_attributes({"region": region, "amount": amount, "vip": amount > 100})
    await ctx.run(noop, 1)
    ctx.set_attributes({"stage": "done", "labels": ["a", region]})
    await ctx.wait_for_signal("finish")
    return region


async def test_attributes_are_indexed_and_filterable(backend: Backend) -> None:
    async with backend.engine(workflows=[tagged]) as engine:
        for i, (region, amount) in enumerate([("eu", 50.0), ("us", 150.0), ("eu", 250.0)]):
            await engine.start(tagged, region, amount, id=f"t{i}")
            backend.clock.advance(1)

        async def indexed() -> bool:
            page = await engine.list(attributes={"stage": "done"})
            return len(page.items) == 3

        await eventually(indexed, what="attributes committed")
        eu = await engine.list(attributes={"region": "eu"})
        assert [i.id for i in eu.items] == ["t2", "t0"]
        big = await engine.list(attributes={"amount": {"gte": 100}})
        assert [i.id for i in big.items] == ["t2", "t1"]
        vip_eu = await engine.list(attributes={"region": "eu", "vip": True})
        assert [i.id for i in vip_eu.items] == ["t2"]
        labelled = await engine.list(attributes={"labels": "us"})
        assert [i.id for i in labelled.items] == ["t1"]
        info = await engine.describe("t1")
        assert info.attributes == {
            "region": "us", "amount": 150.0, "vip": True, "stage": "done", "labels": ["a", "us"],
        }  # fmt: skip

        await engine.set_attributes("t0", {"region": "apac", "vip": None})
        assert [i.id for i in (await engine.list(attributes={"region": "apac"})).items] == ["t0"]
        assert [i.id for i in (await engine.list(attributes={"region": "eu"})).items] == ["t2"]

        by_region = await engine.aggregate(group_by="region")
        assert {g.key: g.count for g in by_region} == {"eu": 1, "us": 1, "apac": 1}
        by_status = await engine.aggregate(group_by="status")
        assert [(g.key, g.count) for g in by_status] == [("running", 3)]
        for i in range(3):
            await engine.signal(f"t{i}", "finish")
            await engine.get_handle(f"t{i}").result(timeout=5)
        done = await engine.aggregate(group_by="status", workflow_type="tagged")
        assert [(g.key, g.count) for g in done] == [("completed", 3)]


async def test_list_filters_by_many_fields(backend: Backend) -> None:
    async with backend.engine(workflows=[tagged]) as engine:
        start = backend.clock.now()
        await engine.start(tagged, "eu", 1.0, id="order-1", tags=["red"])
        backend.clock.advance(10)
        await engine.start(tagged, "eu", 1.0, id="order-2", tags=["red", "blue"])
        backend.clock.advance(10)
        await engine.start(tagged, "eu", 1.0, id="invoice-1", tags=["blue"])
        ids = lambda page: [i.id for i in page.items]  # noqa: E731
        assert ids(await engine.list(id_prefix="order-")) == ["order-2", "order-1"]
        assert ids(await engine.list(tags=["red"])) == ["order-2", "order-1"]
        assert ids(await engine.list(tags=["red", "blue"])) == ["order-2"]
        assert ids(await engine.list(created_after=start + 5, created_before=start + 15)) == [
            "order-2"
        ]
        assert ids(await engine.list(status=["running", "completed"], limit=2)) == [
            "invoice-1",
            "order-2",
        ]
        with pytest.raises(InvalidArgumentError):
            await engine.list(attributes={"bad name!": 1})
        with pytest.raises(InvalidArgumentError):
            await engine.list(attributes={"amount": {"between": 1}})
        with pytest.raises(InvalidArgumentError):
            await engine.list(created_after=datetime(2030, 1, 1))  # naive
        with pytest.raises(InvalidArgumentError):
            await engine.aggregate(group_by="status", colour="red")


async def test_fork_reuses_the_journal_up_to_a_step(backend: Backend) -> None:
    calls: list[int] = []

    @activity
    async def count(x: int) -> int:
        calls.append(x)
        return x

    @workflow(name="three_steps")
    async def three_steps(ctx: WorkflowContext) -> list[int]:
        return [await ctx.run(count, 1), await ctx.run(count, 2), await ctx.run(count, 3)]

    async with backend.engine(workflows=[three_steps]) as engine:
        source = await engine.start(three_steps)
        assert await source.result(timeout=5) == [1, 2, 3]
        fork = await engine.fork(source.id, from_step=2)
        assert await fork.result(timeout=5) == [1, 2, 3]
        info = await fork.describe()
    assert calls == [1, 2, 3, 3]  # only step 3 ran again
    assert info.forked_from == source.id


async def test_with_fail_run_a_version_change_fails_only_runs_of_the_old_version(
    backend: Backend,
) -> None:
    def make(version: str) -> object:
        @workflow(name="versioned", version=version)
        async def versioned(ctx: WorkflowContext) -> str:
            await ctx.sleep(5)
            return version

        return versioned

    async with backend.engine(workflows=[make("1")]) as engine:
        await engine.start("versioned", id="old")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")
    async with backend.engine(workflows=[make("2")], version_mismatch="fail_run") as engine:
        with pytest.raises(WorkflowFailedError) as err:
            await engine.get_handle("old").result(timeout=5)
        assert err.value.error_type == "VersionMismatchError"
    async with backend.engine(workflows=[make("1")]) as engine:
        pass
    engine = backend.engine(workflows=[make("3")], version_mismatch="raise")
    async with backend.engine(workflows=[make("1")]) as first:
        await first.start("versioned", id="old2")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")
    with pytest.raises(VersionMismatchError):
        await engine.open()


async def test_get_version_pins_old_runs_to_the_old_branch(backend: Backend) -> None:
    @workflow(name="patched")
    async def before_patch(ctx: WorkflowContext) -> str:
        await ctx.sleep(5)
        return "old"

    async with backend.engine(workflows=[before_patch]) as engine:
        await engine.start("patched", id="in-flight")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="asleep")

    @workflow(name="patched")
    async def after_patch(ctx: WorkflowContext) -> str:
        v = await ctx.get_version("greeting", 1, 2)
        await ctx.sleep(5)
        return "old" if v == 1 else "new"

    async with backend.engine(workflows=[after_patch]) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="re-armed")
        fresh = await engine.start("patched", id="fresh")
        await eventually(lambda: backend.clock.pending_timers() == 2, what="both asleep")
        backend.clock.advance(5)
        assert await engine.get_handle("in-flight").result(timeout=5) == "old"
        assert await fresh.result(timeout=5) == "new"


async def test_retention_purges_finished_runs_and_spends_their_keys(backend: Backend) -> None:
    @workflow(name="short_lived", retention={"completed": "1h"})
    async def short_lived(ctx: WorkflowContext) -> int:
        return 1

    async with backend.engine(
        workflows=[short_lived, tagged],
        retention={"completed": "1d"},
        retention_sweep_interval="1000d",  # only the explicit sweeps below run
    ) as engine:
        quick = await engine.start(short_lived, idempotency_key="once")
        await quick.result(timeout=5)
        slow = await engine.start(tagged, "eu", 1.0)
        backend.clock.advance(3601)
        assert await engine.sweep_retention() == 1
        assert (await engine.list(workflow_type="short_lived")).items == []
        assert await engine.storage.scan(f"wf:{quick.id}") == []
        with pytest.raises(IdempotencyKeySpentError):
            await engine.start(short_lived, idempotency_key="once")
        assert (await engine.describe(slow.id)).status == "running"  # never purged while running
        await engine.signal(slow.id, "finish")
        await slow.result(timeout=5)
        assert await engine.purge(workflow_type="tagged") == 1
        assert (await engine.aggregate(group_by="status")) == []
