"""``RemoteWorker`` against a real server: refusals it raises, the activity context it
gives, limits it enforces, cancellation, draining, and sharing a queue with a store
worker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pyweft import (
    AuthenticationError,
    ConfigurationError,
    PermissionDeniedError,
    RetryPolicy,
    ServerError,
    Worker,
    WorkflowContext,
    WorkflowFailedError,
    activity,
    activity_context,
    workflow,
)
from pyweft.worker import RemoteWorker
from pyweft.worker.remote import stream_url
from support.poll import eventually

from .task_stream_kit import QUEUE, Served, served

SEEN: list[dict[str, Any]] = []
BEGUN: list[str] = []  # one entry per attempt begun


@activity(name="ctx_probe", queue=QUEUE)
async def ctx_probe(tag: str) -> dict[str, Any]:
    ctx = activity_context()
    return {
        "tag": tag,
        "workflow_id": ctx.workflow_id,
        "activity": ctx.activity,
        "attempt": ctx.attempt,
        "token": ctx.workflow_execution_token,
    }


@activity(
    name="silent",
    queue=QUEUE,
    heartbeat_timeout="0.3s",
    retry=RetryPolicy(max_attempts=2, initial_interval=0.01),
)
async def silent() -> None:
    await asyncio.sleep(5)  # never heartbeats


@activity(name="waits", queue=QUEUE)
async def waits(seconds: float) -> str:
    BEGUN.append(activity_context().workflow_id)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        SEEN.append({"cancelled": activity_context().cancel_reason})
        raise
    return "done"


@activity(name="plus", queue=QUEUE)
async def plus(x: int) -> int:
    return x + 1


@workflow
async def probe(ctx: WorkflowContext, tag: str) -> dict[str, Any]:
    return await ctx.run(ctx_probe, tag)


@workflow
async def run_silent(ctx: WorkflowContext) -> None:
    await ctx.run(silent)


@workflow
async def run_waits(ctx: WorkflowContext, seconds: float) -> str:
    return await ctx.run(waits, seconds)


@workflow
async def run_plus(ctx: WorkflowContext, x: int) -> int:
    return await ctx.run(plus, await ctx.run(plus, x))


@pytest.fixture
async def srv(tmp_path: Path) -> Served:  # type: ignore[misc]
    SEEN.clear()
    BEGUN.clear()
    async with served(tmp_path, probe, run_silent, run_waits, run_plus) as s:
        yield s


def test_stream_urls_are_built_from_a_base_url_or_taken_as_given() -> None:
    assert stream_url("http://h:1", "q") == "ws://h:1/api/v1/tasks/q/stream"
    assert stream_url("https://h/base/", "q") == "wss://h/base/api/v1/tasks/q/stream"
    assert stream_url("ws://h/api/v1/tasks/x/stream", "q") == "ws://h/api/v1/tasks/x/stream"
    with pytest.raises(ConfigurationError):
        stream_url("ftp://h", "q")


def test_bad_options_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        RemoteWorker("http://h", activities=[plus], queues="remote")
    with pytest.raises(ConfigurationError):
        RemoteWorker("http://h", activities=[plus], concurrency=0)
    with pytest.raises(ConfigurationError):
        RemoteWorker("http://h", activities=[])


async def test_refusals_are_raised_as_typed_errors(srv: Served) -> None:
    with pytest.raises(AuthenticationError):
        await RemoteWorker(srv.url, activities=[plus], queues=[QUEUE]).start()
    with pytest.raises(PermissionDeniedError):
        await RemoteWorker(
            srv.url, token=srv.reader_token, activities=[plus], queues=[QUEUE]
        ).start()
    with pytest.raises(ServerError):
        await RemoteWorker("http://127.0.0.1:9", token="x", activities=[plus]).start()


async def test_the_activity_sees_its_context_and_the_engine_s_token(srv: Served) -> None:
    async with RemoteWorker(srv.url, token=srv.token, activities=[ctx_probe], queues=[QUEUE]):
        handle = await srv.engine.start(probe, "t")
        got = await handle.result(timeout=10)
    assert got["tag"] == "t" and got["workflow_id"] == handle.id
    assert (got["activity"], got["attempt"]) == ("ctx_probe", 1)
    assert isinstance(got["token"], str) and got["token"]


async def test_the_worker_enforces_the_heartbeat_timeout(srv: Served) -> None:
    async with RemoteWorker(
        srv.url, token=srv.token, activities=[silent], queues=[QUEUE]
    ) as worker:
        handle = await srv.engine.start(run_silent)
        with pytest.raises(WorkflowFailedError):
            await handle.result(timeout=15)
        assert worker.failed == 2
    step = (await srv.engine.history(handle.id)).steps[0]
    assert step.attempts == 2
    assert step.error is not None and "heartbeat" in step.error.message


async def test_a_cancelled_run_cancels_the_attempt_on_the_worker(srv: Served) -> None:
    async with RemoteWorker(srv.url, token=srv.token, activities=[waits], queues=[QUEUE]) as worker:
        handle = await srv.engine.start(run_waits, 30.0)
        await eventually(lambda: bool(BEGUN), timeout=10, what="the attempt to begin")
        await srv.engine.cancel(handle.id)
        await eventually(lambda: bool(SEEN), timeout=10, what="the attempt to be cancelled")
        await eventually(lambda: worker.in_flight == 0, timeout=5, what="the slot to free")
    assert "no longer waits" in SEEN[0]["cancelled"]
    assert await srv.results_stored() == []


async def test_leaving_the_block_drains_the_attempt_in_flight(srv: Served) -> None:
    worker = RemoteWorker(srv.url, token=srv.token, activities=[waits], queues=[QUEUE])
    async with worker:
        handle = await srv.engine.start(run_waits, 0.5)
        await eventually(lambda: bool(BEGUN), timeout=10, what="the attempt to begin")
    assert worker.completed == 1 and not worker.connected
    assert await handle.result(timeout=5) == "done"
    await eventually(lambda: srv.hub.sessions == {}, what="the session to end")


async def test_a_remote_and_a_store_worker_share_a_queue(srv: Served) -> None:
    async with (
        RemoteWorker(
            srv.url, token=srv.token, activities=[plus], queues=[QUEUE], concurrency=4
        ) as remote,
        Worker(
            srv.engine.storage,
            activities=[plus],
            queues=[QUEUE],
            concurrency=4,
            poll_interval=0.05,
        ) as local,
    ):
        handles = [await srv.engine.start(run_plus, i) for i in range(40)]
        assert [await h.result(timeout=30) for h in handles] == [i + 2 for i in range(40)]
        assert remote.completed + local.completed == 80
        assert remote.completed > 0 and local.completed > 0
        ids = {w.id for w in await srv.engine.workers()}
        assert ids == {remote.id, local.id}
    for h in handles:
        steps = (await srv.engine.history(h.id)).steps
        assert [(s.status, s.attempts) for s in steps] == [("completed", 1)] * 2
