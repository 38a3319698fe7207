"""Event-loop stalls (issue 11): named in a warning, and a run that keeps causing them
past its engine's claims is stopped instead of bouncing between engines for ever.

The stalls are real: an ``async`` activity calls ``time.sleep``, which blocks the
loop of the engine that runs it, so timers and claim renewals stop for real.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from pyweft import (
    Engine,
    MemoryStorage,
    RetryPolicy,
    WorkflowContext,
    WorkflowFailedError,
    activity,
    workflow,
)
from pyweft.engine.control.stalls import MAX_STRIKES
from pyweft.errors import ConfigurationError

calls: list[str] = []
_lock = threading.Lock()


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()


@activity
async def blocking_fetch(seconds: float) -> str:
    with _lock:
        calls.append("fetch")
    time.sleep(seconds)  # noqa: ASYNC251 (the bug under test: blocking in an async activity)
    return "page"


@workflow
async def crawl(ctx: WorkflowContext, seconds: float) -> str:
    return str(await ctx.run(blocking_fetch, seconds))


async def test_a_blocking_async_activity_is_named_in_a_stall_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="pyweft.stalls")
    async with Engine(MemoryStorage(), workflows=[crawl], stall_threshold=0.2) as engine:
        handle = await engine.start(crawl, 0.6, id="slow")
        assert await handle.result(timeout=10) == "page"
    # (A loaded machine may add stalls of its own, with no activity running: not these.)
    warned = [
        r.getMessage()
        for r in caplog.records
        if r.name == "pyweft.stalls" and "no activity was running" not in r.getMessage()
    ]
    assert len(warned) == 1, warned
    assert "'blocking_fetch'" in warned[0] and "workflow slow, step 1" in warned[0]
    assert "asyncio.to_thread" in warned[0]
    seconds = float(warned[0].split("blocked for ")[1].split("s")[0])
    assert seconds >= 0.4  # the loop beat every 50 ms at most before and after


@activity(retry=RetryPolicy(max_attempts=10, initial_interval=0.01, backoff=1.0))
async def blocking_flaky(seconds: float) -> str:
    with _lock:
        calls.append("flaky")
    time.sleep(seconds)  # noqa: ASYNC251 (the bug under test)
    raise ConnectionError("upstream timed out")


@workflow
async def keeps_stalling(ctx: WorkflowContext, seconds: float) -> str:
    return str(await ctx.run(blocking_flaky, seconds))


async def test_a_run_that_keeps_stalling_its_engine_past_its_claims_is_failed() -> None:
    """The issue's run slept longer than the claim TTL in an async activity and bounced
    between engines for ever, each attempt freezing the engine it ran on. Every stall
    long enough to put the engine's claims at risk (``ttl - 2 x renew``) counts a strike
    in the store against the run that caused it, wherever it runs; at ``MAX_STRIKES``
    the run is failed with a reason naming the activity. Here the attempts are retries
    in one engine; across engines the strikes add up the same way."""
    async with Engine(
        MemoryStorage(),
        workflows=[keeps_stalling],
        ownership="workflow-lease",
        claim_ttl=0.75,
        claim_renew_interval=0.25,
        stall_threshold=0.1,
    ) as engine:
        handle = await engine.start(keeps_stalling, 0.6, id="bouncer")
        with pytest.raises(WorkflowFailedError) as failed:
            await handle.result(timeout=30)
        assert failed.value.error_type == "EventLoopStall"
        message = failed.value.error_message
        assert "'blocking_flaky'" in message and "asyncio.to_thread" in message
        assert f"{MAX_STRIKES} times" in message
        assert (await engine.describe("bouncer")).status == "failed"
    assert MAX_STRIKES <= len(calls) <= MAX_STRIKES + 1, calls  # not for ever


async def test_stall_threshold_must_be_a_positive_duration() -> None:
    with pytest.raises(ConfigurationError, match="stall_threshold"):
        Engine(MemoryStorage(), stall_threshold=0)
