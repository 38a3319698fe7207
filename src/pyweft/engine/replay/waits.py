"""What every waiting step (signal, update, condition) shares: parking with a durable
deadline, and recording a timeout."""

from __future__ import annotations

from pyweft.engine.replay.records import ErrorInfo, PendingStep, StepRecord
from pyweft.engine.replay.run import Run
from pyweft.errors import WaitTimeoutError


async def park(
    run: Run,
    step: int,
    kind: str,
    name: str,
    deadline: float | None,
    started: float,
    pend: PendingStep | None,
    seen: int,
) -> PendingStep | None:
    """Wait for the next change (or the deadline). The first time a timed wait parks,
    its deadline is stored, so a restart keeps it. Returns the open-step record.

    ``seen`` is ``run.wake_seq`` as read before the caller last looked for what it
    waits on: news that came after that look (even during the write below) ends the
    park at once, so the caller looks again instead of sleeping past it."""
    if deadline is not None and pend is None:
        pend = PendingStep(
            step=step, kind=kind, name=name, deadline=deadline, first_started_at=started
        )
        await run.commit_pending(pend)
    await run.live(run.changed(deadline, seen))
    return pend


def timeout_error(run: Run, step: int, kind: str, name: str) -> WaitTimeoutError:
    return WaitTimeoutError(
        f"workflow {run.id!r} waited for {kind} {name!r} (step {step}) past its timeout",
        workflow_id=run.id,
        step=step,
    )


async def record_timeout(
    run: Run, step: int, kind: str, name: str, started: float
) -> WaitTimeoutError:
    """Commit the wait's timeout as its outcome; returns the error to raise."""
    await run.commit_step(
        StepRecord(
            step=step,
            kind=kind,
            name=name,
            ok=False,
            started_at=started,
            finished_at=run.services.clock.now(),
            error=ErrorInfo(
                type="WaitTimeoutError",
                message=f"no {name!r} {kind} within the timeout",
                code="WaitTimeoutError",
            ),
        )
    )
    return timeout_error(run, step, kind, name)
