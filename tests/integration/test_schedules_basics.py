"""Schedules on the virtual clock: cadence, provenance, ctx.info, pause and delete."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyweft import (
    Engine,
    InvalidScheduleError,
    MemoryStorage,
    ScheduleAlreadyExistsError,
    ScheduleNotFoundError,
    VirtualClock,
    WorkflowContext,
    workflow,
)
from support.schedkit import advance, at, settle

seen: list[tuple[str, str | None, float | None]] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    seen.clear()


@workflow(name="tick")
async def tick(ctx: WorkflowContext, label: str = "none") -> str:
    info = ctx.info
    nominal = None if info.nominal_time is None else info.nominal_time.timestamp()
    seen.append((label, info.schedule_id, nominal))
    return label


async def test_interval_schedule_fires_once_per_period_from_creation() -> None:
    clock = VirtualClock(at("2026-01-01T00:00:00"))
    async with Engine(MemoryStorage(), workflows=[tick], clock=clock) as engine:
        info = await engine.create_schedule("every-10s", tick, "hello", every="10s")
        assert info.next_fire is not None and info.next_fire.timestamp() == at(
            "2026-01-01T00:00:10"
        )
        await advance(engine, clock, 35)
        assert [s[2] for s in seen] == [
            at("2026-01-01T00:00:10"),
            at("2026-01-01T00:00:20"),
            at("2026-01-01T00:00:30"),
        ]
        assert {s[0] for s in seen} == {"hello"} and {s[1] for s in seen} == {"every-10s"}
        runs = await engine.list(schedule_id="every-10s")
        assert sorted(r.id for r in runs.items) == [
            "every-10s@2026-01-01T00:00:10Z",
            "every-10s@2026-01-01T00:00:20Z",
            "every-10s@2026-01-01T00:00:30Z",
        ]
        described = await engine.describe("every-10s@2026-01-01T00:00:20Z")
        assert described.schedule is not None
        assert described.schedule.schedule_id == "every-10s"
        assert described.schedule.nominal_time.timestamp() == at("2026-01-01T00:00:20")
        stored = await engine.schedules.get("every-10s")
        assert stored.fired == 3 and stored.status == "active"


async def test_cron_schedule_with_named_days_fires_on_weekdays_only() -> None:
    clock = VirtualClock(at("2026-01-02T08:00:00"))  # a Friday
    async with Engine(MemoryStorage(), workflows=[tick], clock=clock) as engine:
        await engine.create_schedule("weekday", tick, cron="0 9 * * MON-FRI", timezone="UTC")
        preview = await engine.schedules.preview("weekday", 3)
        assert [p.strftime("%a %H:%M") for p in preview] == ["Fri 09:00", "Mon 09:00", "Tue 09:00"]
        await advance(engine, clock, 4 * 86400, step=3600)
        assert [s[2] for s in seen] == [at("2026-01-02T09:00:00"), at("2026-01-05T09:00:00")]


async def test_paused_schedule_does_not_fire_and_resumes_from_now() -> None:
    clock = VirtualClock(at("2026-01-01T00:00:00"))
    async with Engine(MemoryStorage(), workflows=[tick], clock=clock) as engine:
        await engine.create_schedule("p", tick, every="1m")
        await engine.schedules.pause("p")
        assert (await engine.schedules.get("p")).status == "paused"
        await advance(engine, clock, 300, step=30)
        assert seen == []
        await engine.schedules.resume("p")
        await advance(engine, clock, 61, step=30)
        assert [s[2] for s in seen] == [at("2026-01-01T00:06:00")]


async def test_deleted_schedule_stops_and_its_runs_keep_provenance() -> None:
    clock = VirtualClock(at("2026-01-01T00:00:00"))
    async with Engine(MemoryStorage(), workflows=[tick], clock=clock) as engine:
        await engine.create_schedule("d", tick, every="1m")
        await advance(engine, clock, 60, step=30)
        await engine.schedules.delete("d")
        await advance(engine, clock, 300, step=30)
        assert len(seen) == 1
        with pytest.raises(ScheduleNotFoundError):
            await engine.schedules.get("d")
        assert len((await engine.list(schedule_id="d")).items) == 1


async def test_trigger_starts_a_run_now_outside_the_cadence() -> None:
    clock = VirtualClock(at("2026-01-01T00:00:00"))
    async with Engine(MemoryStorage(), workflows=[tick], clock=clock) as engine:
        await engine.create_schedule("t", tick, "manual", cron="0 0 1 1 *")
        run_id = await engine.schedules.trigger("t")
        assert await engine.get_handle(run_id).result() == "manual"
        assert (await engine.describe(run_id)).schedule is not None
        await settle(engine)
        assert seen[0][1] == "t"


async def test_bad_schedule_options_raise_typed_errors_and_store_nothing() -> None:
    clock = VirtualClock(at("2026-01-01T00:00:00"))
    async with Engine(MemoryStorage(), workflows=[tick], clock=clock) as engine:
        bad: list[dict[str, object]] = [
            {"cron": "61 * * * *"},
            {"cron": "* * *"},
            {"every": "0s"},
            {"cron": "* * * * *", "every": "1m"},
            {},
            {"cron": "* * * * *", "timezone": "Mars/Olympus"},
            {"every": "1m", "overlap": "sometimes"},
            {"every": "1m", "catchup": "maybe"},
            {"every": "1m", "jitter": "-1s"},
            {"every": "1m", "start_at": 100.0, "end_at": 50.0},
        ]
        for options in bad:
            with pytest.raises(InvalidScheduleError):
                await engine.create_schedule("bad", tick, **options)
        with pytest.raises(InvalidScheduleError, match="'@'"):
            await engine.create_schedule("a@b", tick, every="1m")
        assert await engine.schedules.list() == []
        await engine.create_schedule("ok", tick, every="1m")
        with pytest.raises(ScheduleAlreadyExistsError):
            await engine.create_schedule("ok", tick, every="2m")
        assert (await engine.schedules.get("ok")).every_s == 60


def test_the_sync_facade_manages_schedules_and_reads_state(tmp_path: Path) -> None:
    import pyweft.sync

    with pyweft.sync.Engine(f"sqlite:///{tmp_path / 's.db'}", workflows=[tick]) as engine:
        made = engine.create_schedule("sync", tick, "x", every="1h")
        assert made.id == "sync" and engine.schedules.get("sync").every_s == 3600
        assert engine.schedules.pause("sync").status == "paused"
        assert [s.id for s in engine.schedules.list()] == ["sync"]
        engine.state.set("k", [1, 2], workflow_type="tick")
        assert engine.get_state("k", workflow_type="tick") == [1, 2]
        engine.schedules.delete("sync")
        assert engine.schedules.list() == []
