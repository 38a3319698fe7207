"""Schedules and time: daylight saving in two zones, catch-up after downtime, jitter."""

from __future__ import annotations

import itertools
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from pyweft import Engine, MemoryStorage, VirtualClock, WorkflowContext, workflow
from support.schedkit import advance, at

fired: list[float] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    fired.clear()


@workflow(name="job")
async def job(ctx: WorkflowContext) -> None:
    assert ctx.info.nominal_time is not None
    fired.append(ctx.info.nominal_time.timestamp())


def local(ts: float, zone: str) -> str:
    return datetime.fromtimestamp(ts, ZoneInfo(zone)).strftime("%m-%d %H:%M %Z")


@pytest.mark.parametrize(
    ("zone", "spring_day", "expected"),
    [
        # Europe/Berlin springs forward on 2026-03-29 at 02:00 (to 03:00).
        ("Europe/Berlin", "2026-03-28T12:00:00", ["03-28 02:30 CET", "03-29 03:00 CEST",
                                                   "03-30 02:30 CEST"]),
        # America/New_York springs forward on 2026-03-08 at 02:00 (to 03:00).
        ("America/New_York", "2026-03-07T12:00:00", ["03-07 02:30 EST", "03-08 03:00 EDT",
                                                      "03-09 02:30 EDT"]),
    ],
)  # fmt: skip
async def test_a_time_in_the_skipped_hour_fires_once_right_after_the_gap(
    zone: str, spring_day: str, expected: list[str]
) -> None:
    clock = VirtualClock(at(spring_day) - 86400)
    async with Engine(MemoryStorage(), workflows=[job], clock=clock) as engine:
        await engine.create_schedule("nightly", job, cron="30 2 * * *", timezone=zone)
        await advance(engine, clock, 3 * 86400, step=600)
        assert [local(t, zone) for t in fired] == expected


@pytest.mark.parametrize(
    ("zone", "fall_day", "expected"),
    [
        # Europe/Berlin falls back on 2026-10-25 at 03:00 (to 02:00): 02:30 happens twice.
        ("Europe/Berlin", "2026-10-24T12:00:00", ["10-24 02:30 CEST", "10-25 02:30 CEST",
                                                   "10-26 02:30 CET"]),
        # America/New_York falls back on 2026-11-01 at 02:00 (to 01:00): 01:30 twice.
        ("America/New_York", "2026-10-31T12:00:00", ["10-31 01:30 EDT", "11-01 01:30 EDT",
                                                      "11-02 01:30 EST"]),
    ],
)  # fmt: skip
async def test_a_time_in_the_repeated_hour_fires_once(
    zone: str, fall_day: str, expected: list[str]
) -> None:
    minute_hour = "30 2" if zone == "Europe/Berlin" else "30 1"
    clock = VirtualClock(at(fall_day) - 86400)
    async with Engine(MemoryStorage(), workflows=[job], clock=clock) as engine:
        await engine.create_schedule("nightly", job, cron=f"{minute_hour} * * *", timezone=zone)
        await advance(engine, clock, 3 * 86400, step=600)
        assert [local(t, zone) for t in fired] == expected


async def test_an_hourly_wildcard_fires_in_both_copies_of_the_repeated_hour() -> None:
    zone = "Europe/Berlin"
    clock = VirtualClock(at("2026-10-24T23:10:00"))  # 01:10 CEST on the 25th
    async with Engine(MemoryStorage(), workflows=[job], clock=clock) as engine:
        await engine.create_schedule("hourly", job, cron="15 * * * *", timezone=zone)
        await advance(engine, clock, 4 * 3600, step=300)
    assert [local(t, zone) for t in fired] == [
        "10-25 01:15 CEST",
        "10-25 02:15 CEST",
        "10-25 02:15 CET",
        "10-25 03:15 CET",
    ]
    assert len(set(fired)) == 4 and all(b - a == 3600 for a, b in itertools.pairwise(fired))


async def test_catch_up_after_downtime_runs_the_latest_and_records_the_missed_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStorage()
    clock = VirtualClock(at("2026-01-01T00:00:00"))
    async with Engine(store, workflows=[job], clock=clock) as engine:
        await engine.create_schedule("m", job, every="1m")
        await advance(engine, clock, 60, step=30)
    assert fired == [at("2026-01-01T00:01:00")]
    clock.advance(5 * 60 + 30)  # no engine for 5 periods (00:02 .. 00:06 missed)
    async with Engine(store, workflows=[job], clock=clock) as engine:
        await advance(engine, clock, 1)
        info = await engine.schedules.get("m")
    assert fired == [at("2026-01-01T00:01:00"), at("2026-01-01T00:06:00")]
    assert info.missed == 4 and info.last_missed is not None
    assert info.last_missed.count == 4
    assert info.last_missed.start.timestamp() == at("2026-01-01T00:02:00")
    assert info.last_missed.end.timestamp() == at("2026-01-01T00:05:00")
    assert info.next_fire is not None and info.next_fire.timestamp() == at("2026-01-01T00:07:00")
    assert any(
        "missed 4 occurrence(s) from 2026-01-01T00:02:00Z to 2026-01-01T00:05:00Z" in r.message
        for r in caplog.records
    )


async def test_catch_up_all_runs_every_missed_occurrence_within_the_window() -> None:
    store = MemoryStorage()
    clock = VirtualClock(at("2026-01-01T00:00:00"))
    async with Engine(store, workflows=[job], clock=clock) as engine:
        await engine.create_schedule(
            "all", job, every="1m", catchup="all", catchup_window="3m30s", overlap="allow_all"
        )
    clock.advance(6 * 60 + 10)  # 00:01 .. 00:06 all missed; only 00:03 onwards in window
    async with Engine(store, workflows=[job], clock=clock) as engine:
        await advance(engine, clock, 1)
        info = await engine.schedules.get("all")
    assert fired == [at(f"2026-01-01T00:0{m}:00") for m in (3, 4, 5, 6)]
    assert info.missed == 2 and info.last_missed is not None
    assert info.last_missed.start.timestamp() == at("2026-01-01T00:01:00")


async def test_jitter_delays_each_occurrence_by_a_stable_amount_below_the_bound() -> None:
    store = MemoryStorage()
    clock = VirtualClock(at("2026-01-01T00:00:00"))
    started: list[float] = []
    async with Engine(store, workflows=[job], clock=clock) as engine:
        await engine.create_schedule("j", job, every="1h", jitter="10m")
        await advance(engine, clock, 3 * 3600 + 600, step=30)
        runs = (await engine.list(schedule_id="j")).items
        started = sorted(r.created_at.timestamp() for r in runs)
    nominal = sorted(fired)
    assert nominal == [at("2026-01-01T01:00:00") + h * 3600 for h in range(3)]
    offsets = [s - n for s, n in zip(started, nominal, strict=True)]
    assert all(0 <= o < 600 + 30 for o in offsets)  # + one clock step of resolution
    assert len({round(o // 30) for o in offsets}) > 1  # not the same offset every time
    from pyweft.engine.schedules.planner import jitter_of

    again = [jitter_of("j", n, 600) for n in nominal]
    assert again == [jitter_of("j", n, 600) for n in nominal]  # stable on every engine
    assert all(abs(o - j) <= 30 for o, j in zip(offsets, again, strict=True))
