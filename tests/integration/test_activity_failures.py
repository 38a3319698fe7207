"""Activity failures as users expect them: the cause, and retry decisions per error."""

from __future__ import annotations

import pytest

from pyweft import (
    ActivityError,
    ApplicationError,
    DefinitionError,
    RetryPolicy,
    WorkflowContext,
    activity,
    activity_context,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

attempts: list[int] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    attempts.clear()


class PaymentDeclined(Exception):
    pass


def charge_card() -> None:
    raise PaymentDeclined("card 4242 declined")


@activity(retry=RetryPolicy(max_attempts=1))
def charge() -> None:
    charge_card()


@workflow(name="charging")
async def charging(ctx: WorkflowContext) -> dict[str, object]:
    try:
        await ctx.run(charge)
    except ActivityError as err:
        return {
            "type": err.error_type,
            "message": err.error_message,
            "traceback": err.error_traceback,
            "cause_is_declined": isinstance(err.cause, PaymentDeclined),
            "cause_message": str(err.cause),
            "chained": err.__cause__ is err.cause,
        }
    return {}


async def test_the_workflow_sees_the_cause_with_type_message_and_traceback(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[charging]) as engine:
        seen = await (await engine.start(charging, id="charge-1")).result(timeout=5)
    assert seen["type"] == "PaymentDeclined"
    assert seen["message"] == "card 4242 declined"
    assert "in charge_card" in str(seen["traceback"])
    assert 'raise PaymentDeclined("card 4242 declined")' in str(seen["traceback"])
    assert seen["cause_is_declined"] is True
    assert seen["cause_message"] == "card 4242 declined"
    assert seen["chained"] is True


async def test_the_cause_is_rebuilt_on_replay_after_a_restart(backend: Backend) -> None:
    @workflow(name="replaying_cause")
    async def replaying_cause(ctx: WorkflowContext) -> str:
        try:
            await ctx.run(charge)
        except ActivityError as err:
            if isinstance(err.cause, PaymentDeclined):
                await ctx.sleep(10)  # the restart happens here; replay rebuilds the cause
                return "declined"
        return "other"

    async with backend.engine(workflows=[replaying_cause]) as engine:
        await engine.start(replaying_cause, id="cause-1")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="the sleep")
    async with backend.engine(workflows=[replaying_cause]) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep re-armed")
        backend.clock.advance(10)
        assert await engine.get_handle("cause-1").result(timeout=5) == "declined"


async def test_a_class_that_cannot_be_found_gives_no_cause_but_keeps_its_name(
    backend: Backend,
) -> None:
    class LocalError(Exception):
        pass

    @activity(retry=RetryPolicy(max_attempts=1))
    async def local() -> None:
        raise LocalError("from a local class")

    @workflow(name="locals")
    async def locals_(ctx: WorkflowContext) -> tuple[str, bool]:
        try:
            await ctx.run(local)
        except ActivityError as err:
            return err.error_type, err.cause is None
        return "", False

    async with backend.engine(workflows=[locals_]) as engine:
        result = await (await engine.start(locals_, id="local-1")).result(timeout=5)
    assert tuple(result) == ("LocalError", True)


@activity(retry=RetryPolicy(max_attempts=None, initial_interval=1, max_interval=1))
async def eventually_works() -> int:
    attempt = activity_context().attempt
    attempts.append(attempt)
    if attempt < 8:
        raise RuntimeError("not yet")
    return attempt


@workflow(name="forever")
async def forever(ctx: WorkflowContext) -> int:
    return await ctx.run(eventually_works)


async def test_max_attempts_none_retries_until_it_succeeds(backend: Backend) -> None:
    async with backend.engine(workflows=[forever]) as engine:
        handle = await engine.start(forever, id="forever-1")
        for n in range(1, 8):
            await eventually(
                lambda n=n: len(attempts) == n and backend.clock.pending_timers() == 1,  # type: ignore[misc]
                what=f"backoff after attempt {n}",
            )
            backend.clock.advance(1)
        assert await handle.result(timeout=5) == 8


def failing_policy_workflow(name: str, policy: RetryPolicy, exc: Exception) -> object:
    @activity(name=f"{name}_act", retry=policy)
    async def act() -> None:
        attempts.append(activity_context().attempt)
        raise exc

    @workflow(name=name)
    async def wf(ctx: WorkflowContext) -> tuple[str, int]:
        try:
            await ctx.run(act)
        except ActivityError as err:
            return err.error_type, err.attempts
        return "", 0

    return wf


@pytest.mark.parametrize(
    ("policy", "exc", "expected"),
    [
        (RetryPolicy(max_attempts=5, non_retryable=["PaymentDeclined"]),
         PaymentDeclined("no"), ("PaymentDeclined", 1)),
        (RetryPolicy(max_attempts=5, non_retryable=[f"{__name__}.PaymentDeclined"]),
         PaymentDeclined("no"), ("PaymentDeclined", 1)),
        (RetryPolicy(max_attempts=5, non_retryable=["LookupError"]),
         KeyError("k"), ("KeyError", 1)),  # a base class's name counts
        (RetryPolicy(max_attempts=5, should_retry=lambda e, n: n < 2),
         RuntimeError("x"), ("RuntimeError", 2)),
        (RetryPolicy(max_attempts=5, should_retry=lambda e, n: not isinstance(e, ValueError)),
         ValueError("bad"), ("ValueError", 1)),
        (RetryPolicy(max_attempts=5),
         ApplicationError("card declined", type="CardDeclined", non_retryable=True),
         ("CardDeclined", 1)),
        (RetryPolicy(max_attempts=5, non_retryable=["CardDeclined"]),
         ApplicationError("card declined", type="CardDeclined"), ("CardDeclined", 1)),
        (RetryPolicy(max_attempts=2), ApplicationError("try again"), ("ApplicationError", 2)),
    ],
)  # fmt: skip
async def test_retry_decisions_per_error(
    backend: Backend, policy: RetryPolicy, exc: Exception, expected: tuple[str, int]
) -> None:
    wf = failing_policy_workflow("decides", policy, exc)
    async with backend.engine(workflows=[wf]) as engine:
        handle = await engine.start(wf, id="decides-1")
        while not (await handle.describe()).is_terminal:
            if backend.clock.pending_timers():
                backend.clock.advance(60)
            await eventually(
                lambda: backend.clock.pending_timers() > 0 or len(attempts) >= expected[1],
                what="next attempt",
            )
        assert tuple(await handle.result(timeout=5)) == expected
    assert attempts == list(range(1, expected[1] + 1))


def test_bad_retry_policies_are_refused() -> None:
    with pytest.raises(DefinitionError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(DefinitionError, match="classes or their names"):
        RetryPolicy(non_retryable=[3])  # type: ignore[list-item]
    with pytest.raises(DefinitionError, match="should_retry"):
        RetryPolicy(should_retry="yes")  # type: ignore[arg-type]
