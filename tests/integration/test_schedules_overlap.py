"""Overlap policies, backfill and code-declared schedules across restarts."""

from __future__ import annotations

import pytest

from pyweft import Engine, MemoryStorage, VirtualClock, WorkflowContext, workflow
from support.schedkit import advance, at, settle

T0 = at("2026-01-01T00:00:00")


@workflow(name="slow")
async def slow(ctx: WorkflowContext) -> str:
    """Runs until it gets the 'go' signal."""
    try:
        await ctx.wait_for_signal("go")
    except Exception:
        return "interrupted"
    return "done"


async def statuses(engine: Engine, schedule_id: str) -> dict[str, str]:
    page = await engine.list(schedule_id=schedule_id)
    return {r.id.split("@")[1]: r.status for r in page.items}


def minute(m: int) -> str:
    return f"2026-01-01T00:{m:02d}:00Z"


async def release(engine: Engine, run_id: str) -> None:
    await engine.signal(run_id, "go")
    await engine.get_handle(run_id).result()


@pytest.mark.parametrize("suspend", [False, True])
async def test_skip_drops_occurrences_while_the_previous_run_is_going(suspend: bool) -> None:
    clock = VirtualClock(T0)
    async with Engine(MemoryStorage(), workflows=[slow], clock=clock) as engine:
        await engine.create_schedule("s", slow, every="1m", overlap="skip")
        await advance(engine, clock, 60, step=30)
        if suspend:  # a suspended previous run still counts as running
            await engine.suspend(f"s@{minute(1)}")
        await advance(engine, clock, 120, step=30)
        assert await statuses(engine, "s") == {minute(1): "suspended" if suspend else "running"}
        assert (await engine.schedules.get("s")).skipped == 2
        if suspend:
            await engine.resume(f"s@{minute(1)}")
        await release(engine, f"s@{minute(1)}")
        await advance(engine, clock, 60, step=30)
        assert set(await statuses(engine, "s")) == {minute(1), minute(4)}


async def test_buffer_one_keeps_one_waiting_occurrence_and_starts_it_after() -> None:
    clock = VirtualClock(T0)
    async with Engine(MemoryStorage(), workflows=[slow], clock=clock) as engine:
        await engine.create_schedule("b1", slow, every="1m", overlap="buffer_one")
        await advance(engine, clock, 200, step=30)  # 00:01 runs; 00:02 buffered; 00:03 dropped
        info = await engine.schedules.get("b1")
        assert [b.timestamp() for b in info.buffered] == [at(minute(2))]
        assert info.skipped == 1
        await release(engine, f"b1@{minute(1)}")
        await advance(engine, clock, 2, step=1)
        assert await statuses(engine, "b1") == {minute(1): "completed", minute(2): "running"}


async def test_buffer_all_starts_every_buffered_occurrence_in_order() -> None:
    clock = VirtualClock(T0)
    async with Engine(MemoryStorage(), workflows=[slow], clock=clock) as engine:
        await engine.create_schedule("ba", slow, every="1m", overlap="buffer_all")
        await advance(engine, clock, 200, step=30)  # 00:01 runs; 00:02, 00:03 buffered
        for m in (1, 2, 3):
            await advance(engine, clock, 2, step=1)
            assert (await statuses(engine, "ba"))[minute(m)] == "running"
            await release(engine, f"ba@{minute(m)}")
        assert (await engine.schedules.get("ba")).skipped == 0


async def test_cancel_previous_cancels_the_running_run_and_starts_the_new_one() -> None:
    clock = VirtualClock(T0)
    async with Engine(MemoryStorage(), workflows=[slow], clock=clock) as engine:
        await engine.create_schedule("cp", slow, every="1m", overlap="cancel_previous")
        await advance(engine, clock, 125, step=5)
        await settle(engine)
        found = await statuses(engine, "cp")
        assert found[minute(2)] == "running"
        # asyncio.CancelledError is no Exception: the workflow's handler does not see it
        assert found[minute(1)] == "cancelled"
        assert (await engine.schedules.get("cp")).running == [f"cp@{minute(2)}"]


async def test_allow_all_starts_every_occurrence_regardless() -> None:
    clock = VirtualClock(T0)
    async with Engine(MemoryStorage(), workflows=[slow], clock=clock) as engine:
        await engine.create_schedule("aa", slow, every="1m", overlap="allow_all")
        await advance(engine, clock, 185, step=30)
        assert await statuses(engine, "aa") == {minute(m): "running" for m in (1, 2, 3)}


@workflow(name="quick")
async def quick(ctx: WorkflowContext) -> str:
    return "ok"


async def test_backfill_runs_every_past_occurrence_once() -> None:
    clock = VirtualClock(at("2026-01-10T00:00:00"))
    async with Engine(MemoryStorage(), workflows=[quick], clock=clock) as engine:
        await engine.create_schedule("daily", quick, cron="0 6 * * *", overlap="allow_all")
        started = await engine.schedules.backfill(
            "daily", at("2026-01-05T00:00:00"), at("2026-01-08T00:00:00")
        )
        assert started == 3
        again = await engine.schedules.backfill(
            "daily", at("2026-01-05T00:00:00"), at("2026-01-09T00:00:00")
        )
        assert again == 1  # the first three already ran: only 01-08 is new
        ids = sorted(r.id for r in (await engine.list(schedule_id="daily")).items)
        assert ids == [f"daily@2026-01-0{d}T06:00:00Z" for d in (5, 6, 7, 8)]


async def test_backfill_respects_the_overlap_policy() -> None:
    clock = VirtualClock(at("2026-01-10T00:00:00"))
    async with Engine(MemoryStorage(), workflows=[slow], clock=clock) as engine:
        await engine.create_schedule("bf", slow, cron="0 6 * * *", overlap="skip")
        started = await engine.schedules.backfill(
            "bf", at("2026-01-05T00:00:00"), at("2026-01-08T00:00:00")
        )
        assert started == 1  # the first one is still running: the others are skipped
        assert (await engine.schedules.get("bf")).skipped == 2


def declared(cron: str | None, zone: str = "UTC") -> object:
    @workflow(name="report", schedule=cron, timezone=zone)
    async def report(ctx: WorkflowContext) -> None:
        return None

    return report


async def test_code_declared_schedules_are_reconciled_when_the_engine_opens() -> None:
    store = MemoryStorage()
    clock = VirtualClock(T0)
    async with Engine(store, workflows=[declared("*/5 * * * *")], clock=clock) as engine:
        info = await engine.schedules.get("report")
        assert (info.origin, info.cron, info.timezone) == ("code", "*/5 * * * *", "UTC")
        await advance(engine, clock, 300, step=60)
        assert len((await engine.list(schedule_id="report")).items) == 1
    async with Engine(store, workflows=[declared("*/5 * * * *")], clock=clock) as engine:
        info2 = await engine.schedules.get("report")
        assert info2.created_at == info.created_at and info2.fired == 1  # kept as it was
    async with Engine(store, workflows=[declared("0 * * * *", "Europe/Berlin")], clock=clock) as e:
        info3 = await e.schedules.get("report")
        assert (info3.cron, info3.timezone) == ("0 * * * *", "Europe/Berlin")
    async with Engine(store, workflows=[quick], clock=clock) as engine:
        # report is not registered here: its schedule is left for an engine that has it
        assert (await engine.schedules.get("report")).cron == "0 * * * *"
    async with Engine(store, workflows=[declared(None)], clock=clock) as engine:
        assert await engine.schedules.list() == []  # the code no longer declares it


async def test_a_declared_schedule_does_not_replace_an_api_schedule_of_that_id() -> None:
    store = MemoryStorage()
    clock = VirtualClock(T0)
    report = declared(None)
    async with Engine(store, workflows=[report], clock=clock) as engine:
        await engine.create_schedule("report", "report", every="1h")
    async with Engine(store, workflows=[declared("* * * * *")], clock=clock) as engine:
        info = await engine.schedules.get("report")
        assert (info.origin, info.every_s, info.cron) == ("api", 3600.0, None)
    async with Engine(store, workflows=[declared(None)], clock=clock) as engine:
        assert [s.id for s in await engine.schedules.list()] == ["report"]
