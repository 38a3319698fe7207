"""``ctx.wait_until``: wait for a predicate over workflow state, as one durable step."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pyweft.engine.replay import waits
from pyweft.engine.replay.operations import guarded
from pyweft.engine.replay.records import StepRecord
from pyweft.engine.replay.run import Run
from pyweft.errors import WorkflowUsageError

_TRUE, _FALSE = b"\xc3", b"\xc2"  # MessagePack true / false


@guarded
async def wait_until(
    run: Run, step: int, predicate: Callable[[], object], timeout_s: float | None
) -> bool:
    """True once ``predicate()`` holds; False if ``timeout_s`` passes first.

    The predicate is re-evaluated whenever an update is applied, a signal
    arrives or a review is decided. If it becomes true on the same tick as the
    deadline, the predicate wins. An exception from the predicate propagates
    to the caller.
    """
    if asyncio.current_task() is not run.task:
        raise WorkflowUsageError(
            "ctx.wait_until must be awaited directly by the workflow, not inside a branch "
            "(asyncio.gather, ctx.all or ctx.race): it holds one durable step and re-evaluates "
            "workflow state, which a branch cannot do deterministically"
        )
    rec = run.replay(step, "condition", "wait_until")
    if rec is not None:
        return rec.value == _TRUE
    await run.enter_live()
    clock = run.services.clock
    pend = run.take_pending(step, "condition", "wait_until")
    started = pend.first_started_at if pend else clock.now()
    deadline = pend.deadline if pend else (None if timeout_s is None else started + timeout_s)
    while True:
        seen = run.wake_seq
        held = bool(predicate())
        if held or (deadline is not None and clock.now() >= deadline):
            await run.commit_step(
                StepRecord(
                    step=step,
                    kind="condition",
                    name="wait_until",
                    ok=True,
                    started_at=started,
                    finished_at=clock.now(),
                    value=_TRUE if held else _FALSE,
                )
            )
            return held
        pend = await waits.park(run, step, "condition", "wait_until", deadline, started, pend, seen)
