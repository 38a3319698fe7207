"""The durable sleep step: its deadline is stored when it starts and survives restarts."""

from __future__ import annotations

from pyweft.engine.replay.operations import operation
from pyweft.engine.replay.records import PendingStep, StepRecord
from pyweft.engine.replay.run import Run


@operation
async def sleep_until(run: Run, step: int, deadline: float | None, seconds: float) -> None:
    """Sleep until ``deadline`` (when given) or for ``seconds`` from the first live call."""
    if run.replay(step, "sleep", "sleep") is not None:
        return
    await run.enter_live()
    clock = run.services.clock
    pend = run.take_pending(step, "sleep", "sleep")
    started = pend.first_started_at if pend else clock.now()
    if pend is None:
        until = deadline if deadline is not None else started + seconds
        if until > started:
            pend = PendingStep(
                step=step, kind="sleep", name="sleep", deadline=until, first_started_at=started
            )
            await run.commit_pending(pend)
    if pend is not None:
        # Parked like the message waits (not on a private timer), so an idle sleeping
        # run can be evicted from memory and brought back at its deadline (residency).
        while clock.now() < pend.deadline:
            await run.live(run.changed(pend.deadline))
    await run.commit_step(
        StepRecord(
            step=step,
            kind="sleep",
            name="sleep",
            ok=True,
            started_at=started,
            finished_at=clock.now(),
        )
    )
