"""A timer a message can interrupt: ``ctx.race_keyed`` over a signal wait and a sleep, in a
loop. Every signal is taken once, in order, and no run is ever torn down as if another
writer had advanced it (issue 16: a stale cache entry did exactly that)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

from pyweft import Engine, WorkflowContext, workflow
from pyweft.storage.base import Delete, Op, Put
from support.backends import Backend
from support.gates import GatedStore, open_store
from support.poll import eventually


@workflow
async def interruptible_timer(ctx: WorkflowContext, count: int) -> list[object]:
    got: list[object] = []
    while len(got) < count:
        key, value = await ctx.race_keyed({"a": ctx.wait_for_signal("a"), "t": ctx.sleep(3600)})
        if key == "a":
            got.append(value)
    return got


def _deletes_signal(ops: Sequence[Op]) -> bool:
    return any(isinstance(op, Delete) and op.key.startswith("sig:timer:a:") for op in ops)


def _buffers_signal(ops: Sequence[Op]) -> bool:
    return any(isinstance(op, Put) and op.key.startswith("sig:timer:a:") for op in ops)


async def test_a_signal_whose_send_returns_late_is_not_taken_twice(backend: Backend) -> None:
    store = GatedStore(open_store(backend))
    async with Engine(
        store,  # type: ignore[arg-type]
        workflows=[interruptible_timer],
        clock=backend.clock,
        ownership="none",
    ) as engine:
        handle = await engine.start(interruptible_timer, 3, id="timer")
        # The run takes signal 0; its commit is held while signal 1 is written, and the
        # send of signal 1 hears back only after the run took signal 1 from the store.
        consuming = store.hold(_deletes_signal, after=False)
        await engine.signal("timer", "a", 0)
        await consuming.reached.wait()
        late_reply = store.hold(_buffers_signal, after=True)
        sending = asyncio.ensure_future(engine.signal("timer", "a", 1))
        await late_reply.reached.wait()
        consuming.release.set()
        await eventually(
            lambda: _races(engine, "timer", 2), what="the run took signal 1 from the store"
        )
        # Told late that signal 1 is buffered: the run must not take it a second time.
        late_reply.release.set()
        await sending
        await engine.signal("timer", "a", 2)
        assert await handle.result(timeout=10) == [0, 1, 2]
        assert engine.stats().redriven == 0


async def _races(engine: Engine, workflow_id: str, races: int) -> bool:
    history = await engine.history(workflow_id)
    return sum(1 for step in history if step.kind == "race") >= races


async def test_a_loop_of_interruptible_timers_takes_every_signal_once_in_order(
    backend: Backend,
) -> None:
    # A couple of seconds per store by default; PYWEFT_TIMER_LOOPS=5000 makes it a soak.
    default = {"memory": 1000, "sqlite": 400}.get(backend.name, 100)
    count = int(os.environ.get("PYWEFT_TIMER_LOOPS", default))
    async with backend.engine(workflows=[interruptible_timer]) as engine:
        handle = await engine.start(interruptible_timer, count, id="loop")

        async def send(first: int, last: int) -> None:
            for i in range(first, last):
                await engine.signal("loop", "a", i)
                if i % 7 == 0:
                    await asyncio.sleep(0)  # let the run catch up sometimes, not always

        # Bursts and trickles, so the run sometimes finds signals waiting in the store
        # and sometimes is woken for each one.
        await send(0, count // 2)
        await asyncio.gather(send(count // 2, count), engine.signal("loop", "noise", None))
        assert await handle.result(timeout=60) == list(range(count))
        assert engine.stats().redriven == 0
