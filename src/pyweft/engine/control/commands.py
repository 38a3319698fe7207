"""Controlling runs from outside: results, cancel, suspend, resume, recovery."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import msgspec

from pyweft.engine.control import lifecycle
from pyweft.engine.replay import quarantine
from pyweft.engine.replay.records import TERMINAL_STATUSES, ErrorInfo
from pyweft.engine.replay.recovery import ids_with_status
from pyweft.engine.replay.run import Superseded
from pyweft.engine.visibility.reader import outcome_of
from pyweft.errors import (
    EngineClosedError,
    InvalidArgumentError,
    ResultTimeoutError,
    WorkflowTerminalError,
)

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore

log = logging.getLogger("pyweft.engine")

FAILED_BY_OPERATOR = "FailedByOperator"
"""The error type of a run ended with ``engine.fail`` (its message is the reason given)."""


async def result(core: EngineCore, workflow_id: str, timeout: float | None) -> Any:
    core.services_or_raise()
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    delay = 0.005
    while True:
        await core.settled(workflow_id)
        if core.redriver.is_stranded(workflow_id):
            # Stopped here by a storage failure: wait until this engine resumes it.
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                async with asyncio.timeout(remaining):
                    await core.redriver.wait(workflow_id)
            except TimeoutError:
                raise _result_timeout(workflow_id, timeout) from None
            continue
        run = core.runs.get(workflow_id)
        if run is not None:
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                async with asyncio.timeout(remaining):
                    state = await asyncio.shield(run.done)
            except TimeoutError:
                raise _result_timeout(workflow_id, timeout) from None
            except EngineClosedError:
                core.services_or_raise()
                continue
            # Outside the try: a WorkflowTimeoutError is a TimeoutError too.
            return outcome_of(state, core.codec, core.workflows)
        state = await core.visibility.state(workflow_id)
        if state.status in TERMINAL_STATUSES:
            return outcome_of(state, core.codec, core.workflows)
        if deadline is not None and loop.time() >= deadline:
            raise _result_timeout(workflow_id, timeout)
        # Not driven here (another process, suspended, or recover=False): poll the store.
        wait = delay if deadline is None else min(delay, max(0.0, deadline - loop.time()))
        await asyncio.sleep(wait)
        delay = min(delay * 2, 0.5)


def _result_timeout(workflow_id: str, timeout: float | None) -> ResultTimeoutError:
    return ResultTimeoutError(
        f"workflow {workflow_id!r} did not finish within {timeout}s; it keeps running — "
        "call result() again to keep waiting",
        workflow_id=workflow_id,
    )


async def cancel(core: EngineCore, workflow_id: str) -> None:
    core.services_or_raise()
    # An evicted run is replayed to take the cancel; if it is evicted again before the
    # request is written, it is brought back and asked again.
    while (run := await core.resident(workflow_id)) is not None:
        try:
            await run.request_cancel()
        except Superseded:
            break  # the run changed under us (it is torn down): record it through the store
        if run.cancel_requested or not core.residency.holds(workflow_id):
            core.residency.wake(workflow_id)  # evicted after the write: its replay takes it
            return
    core.disarm_pending(workflow_id)
    # A running run may be driven by another process: record the request and wake that
    # engine, which delivers it (or the next engine to recover the run does).
    requested, current = await lifecycle.transition(
        core.storage,
        core.committer,
        workflow_id,
        frozenset({"running"}),
        core.clock.now(),
        wake=True,
        cancel_requested=True,
    )
    if requested is not None or current.status not in (
        "pending",
        "enqueued",
        "suspended",
        "blocked",
    ):
        return  # the request is recorded, or the run already finished
    # An enqueued run leaves its queue in the same batch (see status_change_ops).
    new, _ = await lifecycle.transition(
        core.storage,
        core.committer,
        workflow_id,
        frozenset({"pending", "enqueued", "suspended", "blocked"}),
        core.clock.now(),
        status="cancelled",
        cancel_requested=True,
    )
    if new is not None:
        core.emit("cancelled", new)
        await core.close_children(workflow_id)  # the requests are stored; tell ours now


async def suspend(core: EngineCore, workflow_id: str) -> None:
    core.services_or_raise()
    await core.resident(workflow_id)
    run = core.runs.get(workflow_id)
    if run is not None:
        run.stopping = True
        release = core.claims.release_ops(workflow_id) if core.claims is not None else []
        try:
            await run.write_state(
                msgspec.structs.replace(run.state, status="suspended", updated_at=core.clock.now()),
                release,
            )
        except BaseException:
            run.stopping = False
            raise
        if core.claims is not None:
            core.claims.forget(workflow_id)
        if run.task is not None:
            run.tear_down("the run was suspended")
            run.task.cancel()  # even if it is not waiting: it must not take another step
            await asyncio.gather(run.task, return_exceptions=True)
        core.emit("suspended", run.state)
        return
    core.disarm_pending(workflow_id)
    new, _ = await lifecycle.transition(
        core.storage,
        core.committer,
        workflow_id,
        frozenset({"pending", "running"}),
        core.clock.now(),
        wake=True,
        rotate_claim=core.claims is not None,  # takes the run from its owner, wherever it is
        status="suspended",
    )
    if new is not None:
        core.emit("suspended", new)


async def resume(core: EngineCore, workflow_id: str) -> None:
    core.services_or_raise()
    await core.settled(workflow_id)
    if workflow_id in core.runs:
        return
    current = await core.visibility.state(workflow_id)
    if current.status == "blocked" and await core.resume_run(workflow_id, force=True):
        return  # this engine has the run's code: it replays it here now
    # Suspended, or blocked and not drivable here (a client, another version): mark it
    # running and leave a wake-up, so an engine with its code picks it up.
    new, current = await lifecycle.transition(
        core.storage,
        core.committer,
        workflow_id,
        frozenset({"suspended", "blocked"}),
        core.clock.now(),
        wake=True,  # an engine in another process may be the one to drive it
        status="running",
        error=None,
    )
    if new is None and current.status in TERMINAL_STATUSES:
        raise WorkflowTerminalError(
            f"workflow {workflow_id!r} is {current.status}; it cannot be resumed",
            workflow_id=workflow_id,
            status=current.status,
        )
    if new is None and current.status == "pending":
        raise InvalidArgumentError(
            f"workflow {workflow_id!r} is pending; it starts on its own at its start time"
        )
    if new is not None:
        core.emit("resumed", new)
    await core.resume_run(workflow_id)


FAILABLE = frozenset({"blocked", "suspended", "pending", "enqueued"})
MAX_REASON_CHARS = 2000


async def fail(core: EngineCore, workflow_id: str, reason: str) -> None:
    """End a run that no engine is driving (blocked, suspended or pending) as ``failed``."""
    core.services_or_raise()
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise InvalidArgumentError(
            f"reason must be a non-empty string of at most {MAX_REASON_CHARS} characters "
            f"saying why the run is failed by hand, got {reason!r:.80}"
        )
    await core.settled(workflow_id)
    core.disarm_pending(workflow_id)
    new, current = await lifecycle.transition(
        core.storage,
        core.committer,
        workflow_id,
        FAILABLE,
        core.clock.now(),
        wake=True,  # an engine holding it (a pending run's timer) lets go
        rotate_claim=core.claims is not None,
        status="failed",
        error=ErrorInfo(type=FAILED_BY_OPERATOR, message=reason.strip(), code=FAILED_BY_OPERATOR),
    )
    if new is not None:
        core.blocked_here.discard(workflow_id)
        core.emit("failed", new, reason=reason.strip())
        return
    if current.status in TERMINAL_STATUSES:
        raise WorkflowTerminalError(
            f"workflow {workflow_id!r} is already {current.status}; it cannot be failed",
            workflow_id=workflow_id,
            status=current.status,
        )
    raise InvalidArgumentError(
        f"workflow {workflow_id!r} is {current.status}: an engine is driving it, so it cannot "
        "be failed from outside. Cancel it (engine.cancel) or suspend it first, then fail it"
    )


async def recover_all(core: EngineCore) -> int:
    core.services_or_raise()
    started = time.perf_counter()
    for workflow_id in await ids_with_status(core.storage, "pending"):
        if workflow_id not in core.pending_timers:
            state = await quarantine.state(core, workflow_id)  # None: gone or quarantined
            if state is not None and state.status == "pending" and state.type in core.workflows:
                core.arm_pending(state)
    ids = [i for i in await ids_with_status(core.storage, "running") if i not in core.runs]
    resumed = 0
    if core.claims is not None and ids:
        # Under workflow-lease, the runs nobody holds a live claim on are taken the way
        # the reclaim scan takes a dead engine's runs: claims in batches, the runs held
        # as evicted and replayed in the background (at once when something concerns
        # one), so opening over many runs does not wait for each replay. Runs left for
        # their type or version still go through resume_run below, which logs them,
        # blocks or fails them, or raises (version_mismatch="raise"); runs held by a
        # live engine are that engine's.
        undrivable: list[str] = []
        resumed += await core.reclaim(undrivable)
        ids = undrivable

    async def one(workflow_id: str) -> None:
        nonlocal resumed
        try:
            if await core.resume_run(workflow_id, recovering=True):
                resumed += 1
        finally:
            core.loading.pop(workflow_id, None)

    loop = asyncio.get_running_loop()
    for workflow_id in ids:
        core.loading[workflow_id] = loop.create_task(one(workflow_id))
    tasks = [core.loading[i] for i in ids if i in core.loading]
    if tasks:
        await asyncio.gather(*tasks)
    resumed += await core.adopt_blocked()  # blocked runs this code may replay now
    if ids:
        log.info("recovered %d run(s) in %.1f ms", resumed, (time.perf_counter() - started) * 1e3)
    return resumed
