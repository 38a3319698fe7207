"""Keyed reconciliation: a dispatch whose outcome was lost is verified, not run blindly.

Here the engine stops driving the run mid-attempt (shutdown: nothing is recorded)
and a new engine recovers it; tests/crash/test_sigkill_reconciliation.py does the
same with SIGKILL.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pyweft import (
    ActivityError,
    DefinitionError,
    RetryPolicy,
    VerifyResult,
    WorkflowContext,
    activity,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

charges: list[str] = []
verified: list[str] = []
ANSWER: dict[str, Any] = {}
gate = threading.Event()


@pytest.fixture(autouse=True)
def _reset() -> None:
    charges.clear()
    verified.clear()
    ANSWER.clear()
    gate.clear()


def check_charge(key: str, order: str, cents: int) -> VerifyResult:
    verified.append(key)
    answer = ANSWER["answer"]
    if isinstance(answer, Exception):
        raise answer
    return answer  # type: ignore[no-any-return]


@activity(
    idempotency_key=lambda order, cents: f"charge/{order}",
    verify=check_charge,
    retry=RetryPolicy(max_attempts=3, initial_interval=1),
    cancel_grace="1s",
)
def charge(order: str, cents: int) -> str:
    charges.append(order)
    if len(charges) == 1:
        gate.wait(10)  # the first dispatch never reports back: its engine goes away
    return f"receipt-{order}-{len(charges)}"


@activity(idempotency_key=lambda order: f"ship/{order}", cancel_grace="1s")
def ship(order: str) -> str:
    charges.append(order)
    gate.wait(10)
    return "shipped"


@workflow(name="checkout")
async def checkout(ctx: WorkflowContext, order: str) -> Any:
    try:
        return await ctx.run(charge, order, 500)
    except ActivityError as err:
        return {"error_type": err.error_type, "message": err.error_message}


@workflow(name="shipping")
async def shipping(ctx: WorkflowContext, order: str) -> Any:
    try:
        return await ctx.run(ship, order)
    except ActivityError as err:
        return {"error_type": err.error_type, "message": err.error_message}


async def lose_first_dispatch(backend: Backend, wf: Any, order: str) -> None:
    """Start ``wf`` and stop its engine while the first attempt is in flight."""
    async with backend.engine(workflows=[wf]) as engine:
        await engine.start(wf, order, id=f"run-{order}")
        await eventually(lambda: len(charges) == 1, what="first dispatch")
    gate.set()  # that thread returns now; nobody records what it returned


async def recover(backend: Backend, wf: Any, order: str) -> Any:
    async with backend.engine(workflows=[wf]) as engine:
        return await engine.get_handle(f"run-{order}").result(timeout=5)


async def test_verify_not_completed_runs_the_activity_again(backend: Backend) -> None:
    ANSWER["answer"] = VerifyResult.not_completed()
    await lose_first_dispatch(backend, checkout, "o1")
    assert await recover(backend, checkout, "o1") == "receipt-o1-2"
    assert verified == ["charge/o1"] and charges == ["o1", "o1"]


async def test_verify_completed_records_its_result_and_runs_nothing(backend: Backend) -> None:
    ANSWER["answer"] = VerifyResult.completed("receipt-from-provider")
    await lose_first_dispatch(backend, checkout, "o2")
    assert await recover(backend, checkout, "o2") == "receipt-from-provider"
    assert verified == ["charge/o2"] and charges == ["o2"]


@pytest.mark.parametrize(
    "answer",
    [
        VerifyResult.completed_result_unavailable("the provider keeps no receipts"),
        VerifyResult.indeterminate("the provider is down"),
        RuntimeError("verify crashed"),
        "yes",  # not a VerifyResult
    ],
)
async def test_unproven_outcomes_fail_closed_with_the_key(backend: Backend, answer: Any) -> None:
    ANSWER["answer"] = answer
    await lose_first_dispatch(backend, checkout, "o3")
    result = await recover(backend, checkout, "o3")
    assert result["error_type"] == "ActivityReconciliationError"
    assert "'charge/o3'" in result["message"]
    assert charges == ["o3"]  # never run again


async def test_a_keyed_activity_without_verify_fails_closed(backend: Backend) -> None:
    await lose_first_dispatch(backend, shipping, "o4")
    result = await recover(backend, shipping, "o4")
    assert result["error_type"] == "ActivityReconciliationError"
    assert "no verify function" in result["message"]
    assert charges == ["o4"]


@activity(idempotency_key=lambda n: f"k/{n}", retry=RetryPolicy(max_attempts=2, initial_interval=1))
async def fails_cleanly(n: int) -> str:
    charges.append(str(n))
    if len(charges) == 1:
        raise RuntimeError("declined before any effect")
    return "ok"


@workflow(name="clean_failure")
async def clean_failure(ctx: WorkflowContext) -> str:
    return await ctx.run(fails_cleanly, 1)


async def test_an_attempt_that_raised_is_retried_without_verify(backend: Backend) -> None:
    async with backend.engine(workflows=[clean_failure]) as engine:
        handle = await engine.start(clean_failure, id="clean-1")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="the backoff")
        backend.clock.advance(1)
        assert await handle.result(timeout=5) == "ok"
    assert charges == ["1", "1"]


@activity(cancel_grace="1s")
def unkeyed(order: str) -> str:
    charges.append(order)
    if len(charges) == 1:
        gate.wait(10)
    return "done"


@workflow(name="unkeyed_wf")
async def unkeyed_wf(ctx: WorkflowContext, order: str) -> str:
    return await ctx.run(unkeyed, order)


async def test_unkeyed_activities_stay_at_least_once(backend: Backend) -> None:
    await lose_first_dispatch(backend, unkeyed_wf, "o6")
    assert await recover(backend, unkeyed_wf, "o6") == "done"
    assert charges == ["o6", "o6"] and verified == []  # ran again; nothing verified


async def test_per_call_keys_and_bad_keys(backend: Backend) -> None:
    @workflow(name="per_call")
    async def per_call(ctx: WorkflowContext, order: str) -> Any:
        try:
            return await ctx.run(ship, order, idempotency_key=f"custom/{order}")
        except ActivityError as err:
            return err.error_message

    await lose_first_dispatch(backend, per_call, "o5")
    message = await recover(backend, per_call, "o5")
    assert "'custom/o5'" in message
    with pytest.raises(DefinitionError, match="idempotency_key must be a function"):
        activity(idempotency_key="not callable")(lambda: None)  # type: ignore[arg-type]
