"""The blocking twins of the workflow-queue methods (``pyweft.sync.Engine``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import pyweft.sync
from pyweft import Queue, QueueDeduplicatedError, QueueNotFoundError, WorkflowContext, workflow


@workflow
async def double(ctx: WorkflowContext, x: int) -> int:
    return x * 2


@workflow
async def double_when_told(ctx: WorkflowContext, x: int) -> int:
    await ctx.wait_for_signal("go")
    return x * 2


def test_sync_engine_enqueues_and_reports_queues(tmp_path: Path) -> None:
    queue = Queue("jobs", concurrency=1)
    url = f"sqlite:///{tmp_path / 'app.db'}"
    workflows = [double, double_when_told]
    with pyweft.sync.Engine(url, workflows=workflows, queues=[queue]) as engine:
        # The first run waits for a signal, so it is surely still queued or running
        # when the second enqueue with its deduplication id comes.
        first = engine.enqueue(queue, double_when_told, 21, deduplication_id="job-21")
        with pytest.raises(QueueDeduplicatedError):
            engine.enqueue("jobs", double_when_told, 21, deduplication_id="job-21")
        first.signal("go")
        assert first.result(timeout=30) == 42
        engine.register_queue(Queue("later"))
        assert [q.name for q in engine.registered_queues] == ["jobs", "later"]
        assert engine.enqueue("later", double, 2).result(timeout=30) == 4
        info = engine.queue_info("jobs")
        assert (info.depth, info.in_flight, info.concurrency) == (0, 0, 1)
        assert [q.name for q in engine.queues()] == ["jobs", "later"]
        with pytest.raises(QueueNotFoundError):
            engine.enqueue("nope", double, 1)
