"""Readers of published events and streams on another engine of the same SQLite file
are woken by the doorbell, not by their poll.

Two engines on one file, each with its own store object (so each has its own hub, as
two processes would): the reader's fallback look is pushed out to a minute, so a read
that finishes within the test's bound can only have been woken by the writer's ring.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyweft import Engine, WorkflowContext, workflow
from pyweft.engine.messages import published_hub
from pyweft.engine.messages.published_hub import hub_for

BOUND_S = 20.0  # far below the reader's pushed-out poll, far above any wake-up


@workflow
async def announcer(ctx: WorkflowContext, n: int) -> str:
    await ctx.wait_for_signal("go")
    await ctx.set_event("ready", "yes")
    out = ctx.stream("lines")
    for i in range(n):
        await out.write(i)
    await ctx.wait_for_signal("end")
    return "ok"


@workflow
async def never_publishes(ctx: WorkflowContext) -> None:
    await ctx.wait_for_signal("end")


@pytest.fixture
def slow_poll(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(published_hub, "SAFETY_POLL_S", 60.0)
    monkeypatch.setattr(published_hub, "FALLBACK_POLL_S", 60.0)
    yield


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'shared.db'}"


async def test_an_sqlite_store_can_wake_readers_elsewhere(tmp_path: Path) -> None:
    async with Engine(_url(tmp_path), workflows=[announcer]) as engine:
        assert hub_for(engine.storage).can_notify


async def test_get_event_on_another_engine_is_woken_by_the_write(
    tmp_path: Path, slow_poll: None
) -> None:
    async with (
        Engine(_url(tmp_path), workflows=[announcer]) as writer,
        Engine(_url(tmp_path), workflows=[announcer], role="client") as reader,
    ):
        assert writer.storage is not reader.storage
        await writer.start(announcer, 3, id="a")
        waiting = asyncio.create_task(reader.get_event("a", "ready", timeout=BOUND_S * 3))
        await asyncio.sleep(0.2)  # the reader looked, found nothing and now waits
        assert not waiting.done()
        await writer.signal("a", "go")
        assert await asyncio.wait_for(waiting, BOUND_S) == "yes"


async def test_a_stream_followed_on_another_engine_gets_each_chunk_when_written(
    tmp_path: Path, slow_poll: None
) -> None:
    async with (
        Engine(_url(tmp_path), workflows=[announcer]) as writer,
        Engine(_url(tmp_path), workflows=[announcer], role="client") as reader,
    ):
        await writer.start(announcer, 50, id="s")
        got: list[int] = []

        async def follow() -> None:
            async for chunk in reader.read_stream("s", "lines"):
                got.append(chunk)
                if len(got) == 50:
                    return

        following = asyncio.create_task(follow())
        await asyncio.sleep(0.2)
        await writer.signal("s", "go")
        await asyncio.wait_for(following, BOUND_S)
        assert got == list(range(50))
        await writer.signal("s", "end")


async def test_a_dead_listeners_socket_is_dropped_and_rings_still_reach_the_live_ones(
    tmp_path: Path, slow_poll: None
) -> None:
    from pyweft.storage.doorbell import bell_dir

    async with (
        Engine(_url(tmp_path), workflows=[announcer]) as writer,
        Engine(_url(tmp_path), workflows=[announcer], role="client") as reader,
    ):
        bells = bell_dir(writer.storage)
        assert bells is not None
        stale = Path(bells) / f"{published_hub.TOPIC}.999999999.deadbeef"
        stale.touch()  # a listener whose process died without cleaning up
        await writer.start(announcer, 1, id="d")
        waiting = asyncio.create_task(reader.get_event("d", "ready", timeout=BOUND_S * 3))
        await asyncio.sleep(0.2)
        await writer.signal("d", "go")
        assert await asyncio.wait_for(waiting, BOUND_S) == "yes"
        assert not stale.exists()
