"""``pyweft.activity_context()``: what an activity attempt sees, in async and def activities."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from pyweft import (
    ActivityContext,
    RetryPolicy,
    WorkflowContext,
    WorkflowUsageError,
    activity,
    activity_context,
    workflow,
)
from support.backends import Backend
from support.poll import eventually

seen: list[dict[str, Any]] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    seen.clear()


def snapshot(ctx: ActivityContext) -> dict[str, Any]:
    return {
        "workflow_id": ctx.workflow_id,
        "workflow_type": ctx.workflow_type,
        "activity": ctx.activity,
        "step": ctx.step,
        "attempt": ctx.attempt,
        "scheduled_at": ctx.scheduled_at,
        "started_at": ctx.started_at,
        "deadline": ctx.deadline,
        "attempt_token": ctx.attempt_token,
        "workflow_execution_token": ctx.workflow_execution_token,
        "thread": threading.current_thread().name,
    }


@activity(retry=RetryPolicy(max_attempts=3, initial_interval=5), timeout="1m")
async def async_probe(fail_first: bool) -> str:
    ctx = activity_context()
    seen.append(snapshot(ctx))
    if fail_first and ctx.attempt == 1:
        raise RuntimeError("first attempt fails")
    return ctx.activity


@activity(retry=RetryPolicy(max_attempts=3, initial_interval=5))
def sync_probe(fail_first: bool) -> str:
    ctx = activity_context()
    seen.append(snapshot(ctx))
    if fail_first and ctx.attempt == 1:
        raise RuntimeError("first attempt fails")
    return ctx.activity


@workflow(name="probing")
async def probing(ctx: WorkflowContext, fail_first: bool) -> list[str]:
    first = await ctx.run(async_probe, fail_first)
    second = await ctx.run(sync_probe, fail_first)
    return [first, second]


async def test_async_and_def_activities_see_their_attempt(backend: Backend) -> None:
    start = datetime.fromtimestamp(backend.clock.now(), tz=UTC)
    async with backend.engine(workflows=[probing]) as engine:
        handle = await engine.start(probing, False, id="probe-1")
        assert await handle.result(timeout=5) == ["async_probe", "sync_probe"]
    first, second = seen
    assert first["workflow_id"] == second["workflow_id"] == "probe-1"
    assert first["workflow_type"] == second["workflow_type"] == "probing"
    assert (first["activity"], first["step"], first["attempt"]) == ("async_probe", 1, 1)
    assert (second["activity"], second["step"], second["attempt"]) == ("sync_probe", 2, 1)
    assert first["scheduled_at"] == first["started_at"] == start
    assert first["deadline"] == datetime.fromtimestamp(backend.clock.now() + 60, tz=UTC)
    assert second["deadline"] is None  # no timeout, no budget
    assert second["thread"] != threading.main_thread().name  # it ran in the pool
    assert first["workflow_execution_token"] == second["workflow_execution_token"]
    assert first["attempt_token"] != second["attempt_token"]


async def test_a_retry_sees_its_attempt_number_and_a_larger_attempt_token(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[probing]) as engine:
        handle = await engine.start(probing, True, id="probe-2")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="first backoff")
        backend.clock.advance(5)
        await eventually(lambda: backend.clock.pending_timers() == 1 and len(seen) == 3)
        backend.clock.advance(5)
        assert await handle.result(timeout=5) == ["async_probe", "sync_probe"]
    attempts = [(s["activity"], s["attempt"]) for s in seen]
    assert attempts == [
        ("async_probe", 1),
        ("async_probe", 2),
        ("sync_probe", 1),
        ("sync_probe", 2),
    ]
    for a, b in ((seen[0], seen[1]), (seen[2], seen[3])):
        assert a["attempt_token"] < b["attempt_token"]
        assert a["scheduled_at"] == b["scheduled_at"] < b["started_at"]


async def test_activity_context_outside_an_activity_is_a_usage_error(backend: Backend) -> None:
    with pytest.raises(WorkflowUsageError, match="outside an activity"):
        activity_context()

    @workflow(name="asks_in_body")
    async def asks_in_body(ctx: WorkflowContext) -> str:
        try:
            activity_context()
        except WorkflowUsageError as err:
            return type(err).__name__
        return "no error"

    async with backend.engine(workflows=[asks_in_body]) as engine:
        handle = await engine.start(asks_in_body, id="body-1")
        assert await handle.result(timeout=5) == "WorkflowUsageError"


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@activity
def logs_with_context() -> str:
    ctx = activity_context()
    ctx.logger.info("working")
    return ctx.attempt_token


@workflow(name="logging_wf")
async def logging_wf(ctx: WorkflowContext) -> str:
    return await ctx.run(logs_with_context)


async def test_the_context_logger_carries_ids_and_tokens(backend: Backend) -> None:
    handler = Collect()
    logger = logging.getLogger("pyweft.activity")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        async with backend.engine(workflows=[logging_wf]) as engine:
            token = await (await engine.start(logging_wf, id="log-1")).result(timeout=5)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    (record,) = [r for r in handler.records if r.getMessage() == "working"]
    assert record.workflow_id == "log-1"  # type: ignore[attr-defined]
    assert record.workflow_type == "logging_wf"  # type: ignore[attr-defined]
    assert record.activity == "logs_with_context"  # type: ignore[attr-defined]
    assert (record.step, record.attempt) == (1, 1)  # type: ignore[attr-defined]
    assert record.attempt_token == token  # type: ignore[attr-defined]
    assert record.workflow_execution_token  # type: ignore[attr-defined]
