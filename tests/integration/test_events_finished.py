"""``handle.events()`` / ``engine.run_events(id)`` end for runs that already finished,
and for runs that finish in another engine."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from pyweft import Engine, WorkflowContext, WorkflowEvent, workflow
from support.backends import Backend
from support.poll import eventually


@workflow(name="waiter")
async def waiter(ctx: WorkflowContext) -> str:
    await ctx.wait_for_signal("go")
    return "done"


@workflow(name="breaker")
async def breaker(ctx: WorkflowContext) -> str:
    raise ValueError("broken")


async def _drain(stream: AsyncIterator[WorkflowEvent]) -> list[WorkflowEvent]:
    async with asyncio.timeout(10):  # a stream that never ends fails here, not by hanging
        return [event async for event in stream]


async def test_events_of_a_finished_run_yield_its_terminal_event_and_end(backend: Backend) -> None:
    async with backend.engine(workflows=[waiter, breaker]) as engine:
        handle = await engine.start(waiter, id="w")
        await eventually(lambda: engine.is_running_here("w"))
        await handle.signal("go")
        await handle.result(timeout=5)
        events = await _drain(handle.events())
        assert [(e.kind, e.workflow_id, e.workflow_type) for e in events] == [
            ("completed", "w", "waiter")
        ]
        info = await handle.describe()
        assert events[0].at == info.updated_at  # when it ended

        await engine.start(breaker, id="b")
        await eventually(lambda: _finished(engine, "b"))
        assert [e.kind for e in await _drain(engine.run_events("b"))] == ["failed"]


async def _finished(engine, workflow_id: str) -> bool:  # type: ignore[no-untyped-def]
    return (await engine.describe(workflow_id)).is_terminal


async def test_events_of_a_finished_run_in_a_new_engine_end(backend: Backend) -> None:
    async with backend.engine(workflows=[waiter]) as engine:
        handle = await engine.start(waiter, id="w")
        await eventually(lambda: engine.is_running_here("w"))
        await handle.signal("go")
        await handle.result(timeout=5)
    async with backend.engine(workflows=[waiter]) as engine:
        events = await _drain(engine.get_handle("w").events())
        assert [e.kind for e in events] == ["completed"]


async def test_a_live_stream_ends_once_with_the_terminal_event(backend: Backend) -> None:
    async with backend.engine(workflows=[waiter]) as engine:
        handle = await engine.start(waiter, id="w")
        stream = handle.events()
        await eventually(lambda: engine.is_running_here("w"))
        await handle.signal("go")
        events = await _drain(stream)
        kinds = [e.kind for e in events]
        assert kinds[-1] == "completed"
        assert kinds.count("completed") == 1


async def test_events_end_when_the_run_finishes_in_another_engine(backend: Backend) -> None:
    async with (
        backend.engine(workflows=[waiter]) as driver,
        backend.engine(workflows=[waiter], role="client", poll_interval=0.05) as watcher,
    ):
        handle = await driver.start(waiter, id="w")
        await eventually(lambda: driver.is_running_here("w"))
        stream = watcher.get_handle("w").events()
        draining = asyncio.ensure_future(_drain(stream))
        await asyncio.sleep(0)  # let the stream start waiting before the run ends
        await handle.signal("go")
        await handle.result(timeout=5)
        events = await draining
        assert [(e.kind, e.workflow_id) for e in events] == [("completed", "w")]


_DRIVER = """
import asyncio, sys
from pyweft import Engine, WorkflowContext, workflow

@workflow(name="waiter")
async def waiter(ctx: WorkflowContext) -> str:
    await ctx.wait_for_signal("go")
    return "done"

async def main() -> None:
    async with Engine(sys.argv[1], workflows=[waiter]) as engine:
        await engine.signal("w", "go")
        print(await engine.get_handle("w").result(timeout=30))

asyncio.run(main())
"""


async def test_events_end_when_the_run_finishes_in_another_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    async with Engine(url, workflows=[waiter], role="client", poll_interval=0.05) as client:
        handle = await client.start(waiter, id="w")  # stored; a real engine drives it
        draining = asyncio.ensure_future(_drain(handle.events()))
        driver = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _DRIVER, url, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await driver.communicate()
        assert driver.returncode == 0 and out.decode().strip() == "done"
        events = await draining
        assert [(e.kind, e.workflow_id) for e in events] == [("completed", "w")]
