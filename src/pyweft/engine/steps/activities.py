"""The activity step: execute with retries, durable backoff, timeouts and a budget."""

from __future__ import annotations

import functools
import logging
from typing import Any, NoReturn

import msgspec

from pyweft.definitions import ActivityDefinition, RetryPolicy
from pyweft.engine.ownership import confirm_owned
from pyweft.engine.replay.operations import operation
from pyweft.engine.replay.records import PendingStep, StepRecord
from pyweft.engine.replay.run import Run
from pyweft.engine.steps import async_completion, reconcile, tokens
from pyweft.engine.steps.activity_context import ActivityContext, enter, leave
from pyweft.engine.steps.async_completion import AsyncPending, is_async_token
from pyweft.engine.steps.attempt import run_attempt
from pyweft.engine.steps.failures import activity_error, failure_info
from pyweft.engine.steps.heartbeats import Heartbeats, throttle_for
from pyweft.errors import ActivityTimeoutError, PayloadError, WorkflowUsageError

log = logging.getLogger("pyweft.activities")


@operation
async def run_activity(
    run: Run,
    step: int,
    act: ActivityDefinition,
    args: tuple[Any, ...],
    retry: RetryPolicy,
    timeout_s: float | None,
    budget_s: float | None,
    per_call_key: str | None = None,
    queue: str | None = None,
) -> Any:
    """One activity step: replayed from the journal, or executed until it succeeds or gives up."""
    rec = run.replay(step, "activity", act.name, args)
    codec = run.services.codec
    if rec is not None:
        if rec.ok:
            return None if rec.value is None else _decode_result(codec, rec.value, act, step)
        raise activity_error(rec)
    await run.enter_live()
    clock = run.services.clock
    pend = run.take_pending(step, "activity", act.name, args)
    carried = run.carried.pop(step, None)
    if carried is not None and carried.name == act.name:
        # It ran in this engine before a storage failure hid whether its outcome was
        # stored: store that outcome now rather than running the activity again.
        await run.commit_step(carried)
        if carried.ok:
            return None if carried.value is None else codec.decode(carried.value, act.result_type)
        raise activity_error(carried)
    attempt = pend.attempt if pend else 0
    first = pend.first_started_at if pend else clock.now()
    if pend is not None and pend.deadline > clock.now():
        await run.live(run.wait_until(pend.deadline))
    # The step's progress record as of now: heartbeat writes and retries build on it.
    base = pend or PendingStep(
        step=step, kind="activity", name=act.name, deadline=0.0, first_started_at=first
    )
    throttle_s = throttle_for(act.heartbeat_throttle_s, act.heartbeat_timeout_s)
    # Parked on an async-completion token before a restart: wait again, do not run it.
    parked = pend.ref if pend is not None and is_async_token(pend.ref) else None
    try:
        key = reconcile.key_for(act, args, per_call_key)
    except Exception as exc:  # the key function failed: nothing was dispatched
        await _fail_step(run, step, act, first, max(attempt, 1), exc)
    execution = functools.partial(tokens.execution_token, run, tokens.owner_epoch(run))
    # Served by worker processes (engine/tasks) when this engine does not serve its queue.
    queue = queue or act.queue or "default"
    tasks = run.services.tasks
    while True:
        attempt += 1
        started = clock.now()
        attempt_timeout = timeout_s
        timeout_kind = "attempt"
        if budget_s is not None:
            left = budget_s - (started - first)
            if timeout_s is None or left < timeout_s:
                attempt_timeout, timeout_kind = left, "schedule_to_close"
        base = msgspec.structs.replace(base, attempt=attempt - 1)
        if key is not None and parked is None:  # (a parked step waits for its token)
            if base.dispatched_key is not None:  # an earlier dispatch's outcome is unknown
                answer = await run.live(reconcile.verify(run, act, base.dispatched_key, args))
                if answer.verdict == "completed":
                    return await _record_verified(run, step, act, first, attempt, answer.result)
                if answer.verdict != "not_completed":
                    error = reconcile.fail_closed(act, step, base.dispatched_key, answer)
                    await _fail_step(run, step, act, first, attempt, error)
            # The dispatch marker is stored before the activity can act.
            base = msgspec.structs.replace(base, dispatched_key=key)
            await run.commit_pending(base)
        # A worker runs it when this engine does not serve its queue, or when an earlier
        # engine already wrote this attempt as a task (it is waited for, not run twice).
        remote = (
            tasks
            if tasks is not None and (not tasks.serves(queue) or tasks.was_dispatched(base))
            else None
        )
        beats = Heartbeats(run, base, throttle_s)
        actx = ActivityContext(
            workflow_id=run.id,
            workflow_type=run.definition.name,
            activity=act.name,
            step=step,
            attempt=attempt,
            scheduled_at=first,
            started_at=started,
            deadline=None if attempt_timeout is None else started + attempt_timeout,
            execution_token=execution,
            generation=run.state.generation,
            last_heartbeat=_details(codec, base),
            heartbeats=beats,
        )
        # A deposed engine must not start what its successor may run too.
        await confirm_owned(run.services.committer.fence, run.id)
        try:
            try:
                if attempt_timeout is not None and attempt_timeout <= 0:
                    raise ActivityTimeoutError(
                        f"activity {act.name!r} ran out of its schedule_to_close budget",
                        kind="schedule_to_close",
                    )
                token = enter(actx)
                try:
                    value = (
                        AsyncPending(parked)
                        if parked is not None
                        else await run.live(
                            run_attempt(run, act, args, actx, beats, attempt_timeout, timeout_kind)
                            if remote is None
                            else remote.execute(
                                run,
                                act,
                                args,
                                actx,
                                base,
                                queue,
                                None if attempt_timeout is None else started + attempt_timeout,
                                timeout_kind,
                            ),
                            # A worker's attempt starts with writing its task, which takes
                            # the run's deferred step records along.
                            commits_first=remote is not None,
                        )
                    )
                finally:
                    leave(token)
                if isinstance(value, AsyncPending):
                    deadline = None if attempt_timeout is None else started + attempt_timeout
                    value = await _await_completion(
                        run, act, actx, beats, base, value, parked, deadline, timeout_kind
                    )
            finally:
                parked = None
                await beats.close()
            payload = run.encode_result(value, f"result of activity {act.name!r}")
            result = _decode_result(codec, payload, act, step)  # before it is recorded as done
        except Exception as exc:
            outcome = run.task_outcomes.pop(step, None)
            if outcome is not None:  # a worker's outcome this engine could not use
                run.staged[outcome.key] = outcome
            now = clock.now()
            delay = retry.delay_after(attempt)
            give_up = (
                isinstance(exc, PayloadError)
                or (budget_s is not None and now + delay - first >= budget_s)
                or not _allows_retry(retry, exc, attempt, act.name)
            )
            info = failure_info(exc)
            if give_up:
                failed = StepRecord(
                    step=step,
                    kind="activity",
                    name=act.name,
                    ok=False,
                    started_at=first,
                    finished_at=now,
                    attempts=attempt,
                    error=info,
                )
                await run.commit_step(failed)
                error = activity_error(failed)  # the same cause live and on replay
                raise error from error.cause
            log.info(
                "activity %s (workflow %s step %d) attempt %d failed: %s; retrying in %.3fs",
                act.name,
                run.id,
                step,
                attempt,
                info.message,
                delay,
                extra=actx.extras(),
            )
            retry_at = now + delay
            details, details_at = beats.carried()
            base = PendingStep(
                step=step,
                kind="activity",
                name=act.name,
                deadline=retry_at,
                attempt=attempt,
                first_started_at=first,
                last_error=info,
                heartbeat=details,
                heartbeat_at=details_at,
                # Timed out: the function may still have acted, so verify before retrying.
                dispatched_key=key if isinstance(exc, ActivityTimeoutError) else None,
            )
            await run.commit_pending(base)
            await run.live(run.wait_until(retry_at))
            continue
        done = StepRecord(
            step=step,
            kind="activity",
            name=act.name,
            ok=True,
            started_at=first,
            finished_at=clock.now(),
            attempts=attempt,
            value=payload,
        )
        outcome = run.task_outcomes.pop(step, None)  # a worker's, stored until this lands
        if outcome is None:
            await run.commit_step(done)
        elif not run.defer_step(done, [outcome]):
            run.staged[outcome.key] = outcome  # (a race branch may lose: delete it anyway)
            await run.commit_step(done)
        return result


async def _await_completion(
    run: Run,
    act: ActivityDefinition,
    actx: ActivityContext,
    beats: Heartbeats,
    base: PendingStep,
    marker: AsyncPending,
    parked: str | None,
    deadline: float | None,
    deadline_kind: str,
) -> Any:
    """The activity returned ``complete_async()``: park the step on its token and wait."""
    if marker.token != actx.async_token:
        raise WorkflowUsageError(
            f"activity {act.name!r} returned the completion marker of another attempt "
            f"({marker.token!r}); return activity_context().complete_async() itself"
        )
    if parked is None:
        beats.rebase(await async_completion.park(run, base, marker.token, announce=True))
    else:
        beats.rebase(msgspec.structs.replace(base, ref=parked))
    payload = await run.live(
        async_completion.wait_outcome(
            run,
            actx.step,
            marker.token,
            beats,
            deadline,
            deadline_kind,
            act.heartbeat_timeout_s,
            act.name,
        )
    )
    return None if payload is None else run.services.codec.decode(payload)


async def _fail_step(
    run: Run, step: int, act: ActivityDefinition, first: float, attempts: int, exc: Exception
) -> NoReturn:
    """Record the step as failed for good with ``exc``, and raise it into the workflow."""
    failed = StepRecord(
        step=step,
        kind="activity",
        name=act.name,
        ok=False,
        started_at=first,
        finished_at=run.services.clock.now(),
        attempts=attempts,
        error=failure_info(exc),
    )
    await run.commit_step(failed)
    error = activity_error(failed)
    raise error from error.cause


async def _record_verified(
    run: Run, step: int, act: ActivityDefinition, first: float, attempts: int, value: Any
) -> Any:
    """``verify`` proved the dispatched attempt completed: its result is the step's."""
    try:
        payload = run.encode_result(value, f"verified result of activity {act.name!r}")
        result = _decode_result(run.services.codec, payload, act, step)
    except PayloadError as exc:
        await _fail_step(run, step, act, first, attempts, exc)
    await run.commit_step(
        StepRecord(
            step=step,
            kind="activity",
            name=act.name,
            ok=True,
            started_at=first,
            finished_at=run.services.clock.now(),
            attempts=attempts,
            value=payload,
        )
    )
    return result


def _allows_retry(retry: RetryPolicy, exc: BaseException, attempt: int, name: str) -> bool:
    try:
        return retry.allows_retry(exc, attempt)
    except Exception as bad:  # a should_retry that fails cannot allow a retry
        log.warning("activity %s: RetryPolicy.should_retry raised %r; not retrying", name, bad)
        return False


def _details(codec: Any, base: PendingStep) -> tuple[Any, bool]:
    """The heartbeat details an earlier attempt of this step left, decoded."""
    if base.heartbeat is None:
        return None, False
    return codec.decode(base.heartbeat), True


def _decode_result(codec: Any, payload: bytes, act: ActivityDefinition, step: int) -> Any:
    try:
        return codec.decode(payload, act.result_type)
    except PayloadError as exc:
        raise PayloadError(
            f"activity {act.name!r} (step {step}) returned a value that does not match its "
            f"return annotation: {exc} Return what the annotation says, or fix the annotation.",
            path=exc.path,
        ) from exc
