"""Messages a workflow sends to other runs: ``ctx.signal_workflow`` and
``ctx.cancel_workflow``, each one durable step.

Sending happens before the step is recorded, so a crash in between sends again
on replay. Exactly once comes from the signal id: it is derived from the sending
run, its generation and the step number, so the resend is recognised as the
same signal by the receiver's accepted marker and buffered only once. A cancel
request is idempotent by nature (asking twice is asking once).

The outcome is recorded: a target that does not exist or has already finished
raises ``WorkflowNotFoundError`` / ``WorkflowTerminalError`` in the workflow, and
replay raises the same error at the same step without sending anything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

from pyweft.engine.messages.signals import SignalSender, check_name
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.operations import operation
from pyweft.engine.replay.records import StepRecord
from pyweft.engine.replay.run import Run
from pyweft.errors import (
    PyweftError,
    WorkflowNotFoundError,
    WorkflowTerminalError,
    WorkflowUsageError,
)

SIGNAL_KIND = "signal_workflow"
CANCEL_KIND = "cancel_workflow"


class _Host(Protocol):
    """What of the engine (``RunServices.children``, the engine core) sending needs."""

    runs: dict[str, Run]
    residency: Any
    cancel_run: Callable[[str], Awaitable[None]]


def _host(run: Run) -> _Host:
    host = run.services.children
    if host is None:
        raise WorkflowUsageError("this run's engine cannot send messages to other workflows")
    return cast("_Host", host)


def derived_signal_id(run: Run, step: int) -> str:
    """The same on every replay of this step, unique across runs and generations."""
    return f"wf:{run.id}:{run.state.generation}:{step}"


def check_target(workflow_id: object) -> str:
    return keys.check_text(workflow_id, "workflow id", keys.MAX_ID_BYTES)


def _replayed(rec: StepRecord, target: str) -> None:
    if rec.ok:
        return
    error = rec.error
    message = error.message if error is not None else ""
    if error is not None and error.type == "WorkflowTerminalError":
        raise WorkflowTerminalError(message, workflow_id=target, status="finished")
    raise WorkflowNotFoundError(message, workflow_id=target)


async def _record(
    run: Run, step: int, kind: str, name: str, started: float, exc: PyweftError | None
) -> None:
    await run.commit_step(
        StepRecord(
            step=step,
            kind=kind,
            name=name,
            ok=exc is None,
            started_at=started,
            finished_at=run.services.clock.now(),
            error=None if exc is None else records.error_info(exc),
        )
    )


@operation
async def signal_workflow(run: Run, step: int, target: str, name: str, payload: object) -> None:
    """Buffer a ``name`` signal for run ``target``, exactly once."""
    rec = run.replay(step, SIGNAL_KIND, name)
    if rec is not None:
        _replayed(rec, target)
        return
    await run.enter_live()
    host = _host(run)
    started = run.services.clock.now()
    sender = SignalSender(run.services, host.runs, host.residency)
    failure: PyweftError | None = None
    try:
        await sender.send(target, name, payload, derived_signal_id(run, step))
    except (WorkflowNotFoundError, WorkflowTerminalError) as exc:
        failure = exc
    await _record(run, step, SIGNAL_KIND, name, started, failure)
    if failure is not None:
        raise failure


@operation
async def cancel_workflow(run: Run, step: int, target: str) -> None:
    """Ask run ``target`` to cancel (recorded: asked once, never again on replay)."""
    rec = run.replay(step, CANCEL_KIND, target)
    if rec is not None:
        _replayed(rec, target)
        return
    await run.enter_live()
    started = run.services.clock.now()
    failure: PyweftError | None = None
    try:
        await _host(run).cancel_run(target)
    except WorkflowNotFoundError as exc:
        failure = exc
    await _record(run, step, CANCEL_KIND, target, started, failure)
    if failure is not None:
        raise failure


def check_signal_args(run: Run, target: object, name: object) -> tuple[str, str]:
    checked = check_target(target)
    return checked, check_name(name, "signal")


def check_cancel_target(run: Run, target: object) -> str:
    checked = check_target(target)
    if checked == run.id:
        raise WorkflowUsageError(
            f"workflow {run.id!r} cannot cancel itself with ctx.cancel_workflow: return, or "
            "raise, to end the run"
        )
    return checked
