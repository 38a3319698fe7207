"""Schedule events on ``engine.events()``: fired, skipped, buffered, missed, and changes.

Time is a VirtualClock moved by the test; nothing sleeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from pyweft import Engine, MemoryStorage, VirtualClock, WorkflowContext, WorkflowEvent, workflow
from support.schedkit import advance, at, settle

T0 = at("2026-01-01T00:00:00")


@workflow(name="ev_slow")
async def ev_slow(ctx: WorkflowContext) -> str:
    """Runs until it gets the 'go' signal."""
    try:
        await ctx.wait_for_signal("go")
    except Exception:
        return "interrupted"
    return "done"


@workflow(name="ev_quick")
async def ev_quick(ctx: WorkflowContext) -> str:
    return "ok"


def drain(stream: AsyncIterator[WorkflowEvent]) -> list[WorkflowEvent]:
    """Every event the stream has buffered so far (they are emitted synchronously)."""
    queue = stream._sub.queue  # type: ignore[attr-defined]
    out = list(queue)
    queue.clear()
    return out


def schedule_events(events: list[WorkflowEvent]) -> list[WorkflowEvent]:
    return [e for e in events if e.kind.startswith("schedule_")]


async def test_each_occurrence_emits_fired_with_its_nominal_time_and_run_id() -> None:
    clock = VirtualClock(T0)
    async with Engine(MemoryStorage(), workflows=[ev_quick], clock=clock) as engine:
        stream = engine.events()
        await engine.create_schedule("q", ev_quick, every="1m")
        await advance(engine, clock, 120, step=30)
        got = schedule_events(drain(stream))
    assert [e.kind for e in got] == ["schedule_created", "schedule_fired", "schedule_fired"]
    created, first, second = got
    assert created.workflow_id == "" and created.data["schedule_id"] == "q"
    assert created.workflow_type == "ev_quick"
    assert first.data == {
        "schedule_id": "q",
        "nominal_time": "2026-01-01T00:01:00Z",
        "run_id": "q@2026-01-01T00:01:00Z",
        "how": "schedule",
    }
    assert first.workflow_id == "q@2026-01-01T00:01:00Z"
    assert first.at.timestamp() == at("2026-01-01T00:01:00")
    assert second.data["nominal_time"] == "2026-01-01T00:02:00Z"


async def test_a_run_started_by_a_schedule_has_its_fired_event_in_its_own_stream() -> None:
    clock = VirtualClock(T0)
    async with Engine(MemoryStorage(), workflows=[ev_slow], clock=clock) as engine:
        stream = engine.events("s@2026-01-01T00:01:00Z")
        await engine.create_schedule("s", ev_slow, every="1m")
        await advance(engine, clock, 60, step=30)
        kinds = [e.kind for e in drain(stream)]
    assert "schedule_fired" in kinds and "started" in kinds


async def test_skip_emits_skipped_for_each_dropped_occurrence() -> None:
    clock = VirtualClock(T0)
    async with Engine(MemoryStorage(), workflows=[ev_slow], clock=clock) as engine:
        stream = engine.events()
        await engine.create_schedule("s", ev_slow, every="1m", overlap="skip")
        await advance(engine, clock, 180, step=30)
        got = [e for e in schedule_events(drain(stream)) if e.kind != "schedule_created"]
        info = await engine.schedules.get("s")
    assert [e.kind for e in got] == ["schedule_fired", "schedule_skipped", "schedule_skipped"]
    assert [e.data["nominal_time"] for e in got[1:]] == [
        "2026-01-01T00:02:00Z",
        "2026-01-01T00:03:00Z",
    ]
    assert got[1].data["overlap"] == "skip"
    assert got[1].data["running"] == ["s@2026-01-01T00:01:00Z"]
    assert info.skipped == 2


async def test_buffer_one_emits_buffered_then_skipped_then_fired_when_the_run_ends() -> None:
    clock = VirtualClock(T0)
    async with Engine(MemoryStorage(), workflows=[ev_slow], clock=clock) as engine:
        stream = engine.events()
        await engine.create_schedule("b", ev_slow, every="1m", overlap="buffer_one")
        await advance(engine, clock, 200, step=30)  # 00:01 runs; 00:02 buffered; 00:03 dropped
        await engine.signal("b@2026-01-01T00:01:00Z", "go")
        await engine.get_handle("b@2026-01-01T00:01:00Z").result()
        await advance(engine, clock, 2, step=1)
        got = [e for e in schedule_events(drain(stream)) if e.kind != "schedule_created"]
    assert [(e.kind, e.data["nominal_time"]) for e in got] == [
        ("schedule_fired", "2026-01-01T00:01:00Z"),
        ("schedule_buffered", "2026-01-01T00:02:00Z"),
        ("schedule_skipped", "2026-01-01T00:03:00Z"),
        ("schedule_fired", "2026-01-01T00:02:00Z"),
    ]
    assert got[1].data["waiting"] == 1


async def test_catch_up_after_downtime_emits_missed_with_the_count_and_window() -> None:
    store = MemoryStorage()
    clock = VirtualClock(T0)
    async with Engine(store, workflows=[ev_quick], clock=clock) as engine:
        await engine.create_schedule("m", ev_quick, every="1m")
        await advance(engine, clock, 60, step=30)
    clock.advance(5 * 60 + 30)  # no engine for 5 periods: 00:02 .. 00:05 missed, 00:06 runs
    engine = Engine(store, workflows=[ev_quick], clock=clock)
    stream = engine.events()  # subscribed before the engine opens and catches up
    async with engine:
        await settle(engine)
        got = schedule_events(drain(stream))
    assert [e.kind for e in got] == ["schedule_missed", "schedule_fired"]
    missed, fired = got
    assert missed.workflow_id == ""
    assert missed.data == {
        "schedule_id": "m",
        "count": 4,
        "window_start": "2026-01-01T00:02:00Z",
        "window_end": "2026-01-01T00:05:00Z",
        "catchup": "latest",
        "missed_total": 4,
    }
    assert fired.data["nominal_time"] == "2026-01-01T00:06:00Z"


async def test_changes_to_a_schedule_emit_updated_paused_resumed_and_deleted() -> None:
    clock = VirtualClock(T0)
    async with Engine(MemoryStorage(), workflows=[ev_quick], clock=clock) as engine:
        stream = engine.events()
        await engine.create_schedule("c", ev_quick, every="1h", paused=True)
        await engine.schedules.update("c", every="2h")
        await engine.schedules.pause("c")
        await engine.schedules.resume("c")
        await engine.schedules.delete("c")
        got = schedule_events(drain(stream))
    assert [e.kind for e in got] == [
        "schedule_created",
        "schedule_updated",
        "schedule_paused",
        "schedule_resumed",
        "schedule_deleted",
    ]
    assert got[0].data == {"schedule_id": "c", "origin": "api", "paused": True}
    assert all(e.data["schedule_id"] == "c" and e.workflow_id == "" for e in got)


async def test_trigger_and_backfill_emit_fired_saying_how() -> None:
    clock = VirtualClock(T0)
    async with Engine(MemoryStorage(), workflows=[ev_quick], clock=clock) as engine:
        await engine.create_schedule("t", ev_quick, cron="0 * * * *", overlap="allow_all")
        stream = engine.events()
        run_id = await engine.schedules.trigger("t")
        started = await engine.schedules.backfill(
            "t", at("2025-12-31T22:00:00"), at("2025-12-31T23:00:00")
        )
        await settle(engine)
        fired = [e for e in drain(stream) if e.kind == "schedule_fired"]
    assert started == 2
    assert [(e.data["how"], e.workflow_id) for e in fired] == [
        ("trigger", run_id),
        ("backfill", "t@2025-12-31T22:00:00Z"),
        ("backfill", "t@2025-12-31T23:00:00Z"),
    ]


async def test_history_of_a_scheduled_run_says_which_schedule_and_occurrence() -> None:
    clock = VirtualClock(T0)
    async with Engine(MemoryStorage(), workflows=[ev_quick], clock=clock) as engine:
        await engine.create_schedule("h", ev_quick, every="1m")
        await advance(engine, clock, 60, step=30)
        history = await engine.history("h@2026-01-01T00:01:00Z")
    scheduled = [e for e in history.events if e.kind == "scheduled"]
    assert [e.detail for e in scheduled] == ["schedule h, occurrence 2026-01-01T00:01:00Z"]
    assert history.events[0].kind == "created"


async def test_a_jittered_schedule_keeps_firing_when_time_stops_at_each_due_key() -> None:
    """Regression: the due key rounds the jittered due time to the microsecond; a timer
    armed at a rounded time just below it found nothing due and re-armed forever."""
    from pyweft.testing import TestEnv

    async with TestEnv(workflows=[ev_quick], start=T0) as env:
        await env.engine.create_schedule("j", ev_quick, every="1h", jitter="59m")
        await env.advance("10h")  # stops the clock at every armed timer in turn
        page = await env.engine.list(schedule_id="j")
    assert len(page.items) in (9, 10)  # the tenth may be jittered past 10:00
    assert all(r.status == "completed" for r in page.items)
