"""Async completion: an activity hands its result to the outside world, completed by token."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyweft import (
    ActivityError,
    ActivityTokenNotFoundError,
    ApplicationError,
    Engine,
    PayloadError,
    RetryPolicy,
    WorkflowContext,
    activity,
    activity_context,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

issued: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    issued.clear()


@activity(retry=RetryPolicy(max_attempts=2, initial_interval=1))
async def ask_human(question: str) -> Any:
    ctx = activity_context()
    issued.append(ctx.async_token)  # e.g. e-mailed in a link
    return ctx.complete_async()


@workflow(name="asking")
async def asking(ctx: WorkflowContext) -> Any:
    try:
        answer = await ctx.run(ask_human, "ship it?")
    except ActivityError as err:
        return f"{err.error_type}: {err.error_message}"
    return {"answer": answer, "then": await ctx.run(echo, "after")}


@activity
async def echo(value: str) -> str:
    return value


async def test_completed_by_token_with_single_use_tokens(backend: Backend) -> None:
    async with backend.engine(workflows=[asking]) as engine:
        events = engine.events("ask-1")
        handle = await engine.start(asking, id="ask-1")
        await eventually(lambda: len(issued) == 1, what="the token")
        (token,) = issued
        event = await asyncio.wait_for(_next_kind(events, "activity_async_pending"), 5)
        assert event.data["token"] == token and event.step == 1

        async def listed() -> bool:
            return [p.token for p in await engine.pending_activities()] == [token]

        await eventually(listed, what="the token listed")
        (waiting,) = await engine.pending_activities("ask-1")
        assert (waiting.workflow_id, waiting.activity, waiting.step, waiting.attempt) == (
            "ask-1",
            "ask_human",
            1,
            1,
        )
        await engine.complete_activity(token, {"yes": True})
        with pytest.raises(ActivityTokenNotFoundError, match="no activity waits"):
            await engine.complete_activity(token, {"yes": False})  # single use
        assert await handle.result(timeout=5) == {"answer": {"yes": True}, "then": "after"}
        with pytest.raises(ActivityTokenNotFoundError):
            await engine.complete_activity(token, {"yes": False})  # spent for good
        assert await engine.pending_activities() == []
        for bad in ("nonsense", token.replace(":1:1", ":1:7"), "pwa1:x:0:1:1"):
            with pytest.raises(ActivityTokenNotFoundError):
                await engine.complete_activity(bad, 1)


async def _next_kind(events: Any, kind: str) -> Any:
    async for event in events:
        if event.kind == kind:
            return event
    raise AssertionError("events ended")


async def test_an_oversized_result_is_refused_and_the_token_stays_usable(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[asking], max_payload_bytes=1000) as engine:
        handle = await engine.start(asking, id="ask-2")
        await eventually(lambda: len(issued) == 1, what="the token")
        await eventually(lambda: _parked(engine, "ask-2"), what="parked")
        with pytest.raises(PayloadError, match="over the 1,000-byte limit"):
            await engine.complete_activity(issued[0], "x" * 2000)
        await engine.complete_activity(issued[0], "small")
        assert (await handle.result(timeout=5))["answer"] == "small"


async def _parked(engine: Engine, workflow_id: str) -> bool:
    return len(await engine.pending_activities(workflow_id)) == 1


async def test_a_failed_attempt_is_retried_with_a_new_token(backend: Backend) -> None:
    async with backend.engine(workflows=[asking]) as engine:
        handle = await engine.start(asking, id="ask-3")
        await eventually(lambda: _parked(engine, "ask-3"), what="parked")
        await engine.fail_activity(issued[0], "mail bounced")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="the backoff")
        backend.clock.advance(1)
        await eventually(lambda: len(issued) == 2, what="the second attempt")
        assert issued[1] != issued[0]
        with pytest.raises(ActivityTokenNotFoundError):
            await engine.complete_activity(issued[0], "late")  # the first attempt is over
        await eventually(lambda: _parked(engine, "ask-3"), what="parked again")
        await engine.fail_activity(issued[1], ApplicationError("no", type="Refused"))
        assert await handle.result(timeout=5) == "Refused: no"


async def test_a_non_retryable_failure_ends_the_step_at_once(backend: Backend) -> None:
    async with backend.engine(workflows=[asking]) as engine:
        handle = await engine.start(asking, id="ask-4")
        await eventually(lambda: _parked(engine, "ask-4"), what="parked")
        await engine.fail_activity(
            issued[0], ApplicationError("rejected", type="Rejected", non_retryable=True)
        )
        assert await handle.result(timeout=5) == "Rejected: rejected"
    assert len(issued) == 1


async def test_a_completion_while_no_engine_drives_the_run_is_applied_on_recovery(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[asking]) as engine:
        await engine.start(asking, id="ask-5")
        await eventually(lambda: _parked(engine, "ask-5"), what="parked")
    # Nobody drives the run now: a client completes it, and it is stored.
    async with backend.engine(role="client") as client:
        await client.heartbeat_activity(issued[0], {"seen": True})
        await client.complete_activity(issued[0], "while down")
        with pytest.raises(ActivityTokenNotFoundError):
            await client.complete_activity(issued[0], "twice")
        # `pyweft doctor` knows the records a completion leaves for the run.
        check = await client.visibility.check_records()
        assert check.damaged == []
        assert not [k for k in check.unrecognised if ":ar:" in k or ":ah:" in k]
    async with backend.engine(workflows=[asking]) as engine:
        result = await engine.get_handle("ask-5").result(timeout=5)
    assert result == {"answer": "while down", "then": "after"}
    assert len(issued) == 1  # the activity did not run again on recovery


@activity(heartbeat_timeout="10s", retry=RetryPolicy(max_attempts=1))
async def waits_for_worker() -> Any:
    issued.append(activity_context().async_token)
    return activity_context().complete_async()


@workflow(name="outsourced")
async def outsourced(ctx: WorkflowContext) -> str:
    try:
        return str(await ctx.run(waits_for_worker))
    except ActivityError as err:
        return f"{err.error_type}: {err.error_message}"


async def test_heartbeats_by_token_keep_a_waiting_activity_alive_until_they_stop(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[outsourced]) as engine:
        handle = await engine.start(outsourced, id="out-1")
        await eventually(lambda: _parked(engine, "out-1"), what="parked")
        backend.clock.advance(6)
        await engine.heartbeat_activity(issued[0], {"pct": 50})

        async def shows_progress() -> bool:
            (waiting,) = await engine.pending_activities("out-1")
            return bool(waiting.heartbeat_details == {"pct": 50})

        await eventually(shows_progress, what="progress stored")
        backend.clock.advance(6)  # 12s after it parked, 6s after the heartbeat
        await asyncio.sleep(0.05)
        assert not (await handle.describe()).is_terminal
        backend.clock.advance(5)  # 11s of silence
        result = await handle.result(timeout=5)
    assert result.startswith("ActivityTimeoutError: ")
    assert "heartbeat" in result
