"""pyweft.sync.Engine completes activities by token from plain code."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import pyweft.sync
from pyweft import (
    ActivityError,
    ActivityTokenNotFoundError,
    RetryPolicy,
    WorkflowContext,
    activity,
    activity_context,
    workflow,
)
from support.backends import Backend


def eventually(check: Callable[[], bool], *, timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.002)


@activity(retry=RetryPolicy(max_attempts=1))
async def approval() -> Any:
    return activity_context().complete_async()


@workflow(name="approvals")
async def approvals(ctx: WorkflowContext) -> Any:
    try:
        return [await ctx.run(approval), await ctx.run(approval)]
    except ActivityError as err:
        return err.error_type


def test_the_sync_engine_lists_heartbeats_completes_and_fails_by_token(backend: Backend) -> None:
    with pyweft.sync.Engine(backend.storage(), workflows=[approvals]) as engine:
        handle = engine.start(approvals, id="sync-approve")
        eventually(lambda: len(engine.pending_activities("sync-approve")) == 1, what="parked")
        (first,) = engine.pending_activities()
        engine.heartbeat_activity(first.token, {"opened": True})
        engine.complete_activity(first.token, "yes")
        with pytest.raises(ActivityTokenNotFoundError):
            engine.complete_activity(first.token, "again")
        eventually(
            lambda: [p.step for p in engine.pending_activities("sync-approve")] == [2],
            what="the second step parked",
        )
        (second,) = engine.pending_activities("sync-approve")
        engine.fail_activity(second.token, "no")
        assert handle.result(timeout=5) == "ApplicationError"
