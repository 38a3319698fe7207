"""Issue 19 metrics where work waits: queue depth and dispatch latency of workflow queues
and activity task queues, schedule lag, and runs started by schedules counted as started.
Scripted workloads on a virtual clock, values checked exactly; ids are never labels."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyweft import (
    Engine,
    MemoryStorage,
    Queue,
    VirtualClock,
    Worker,
    WorkflowContext,
    activity,
    workflow,
)
from pyweft.observability.metrics import MetricsInterceptor
from support.backends import Backend
from support.poll import eventually
from support.schedkit import advance, at

started: list[str] = []
gate: list[asyncio.Event] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    started.clear()
    gate[:] = [asyncio.Event()]


@activity
async def mark(name: str) -> str:
    started.append(name)
    return name


@workflow
async def held(ctx: WorkflowContext, name: str) -> str:
    await ctx.run(mark, name)
    await ctx.wait_for_signal("go")
    return name


async def test_workflow_queue_depth_and_dispatch_latency(backend: Backend) -> None:
    metrics = MetricsInterceptor()
    queue = Queue("imports", concurrency=1)
    async with backend.engine(
        workflows=[held],
        activities=[mark],
        queues=[queue],
        interceptors=[metrics],
        poll_interval=0.05,
    ) as eng:
        for i in range(3):
            await eng.enqueue(queue, held, f"r{i}", id=f"r{i}")
        await eventually(lambda: started == ["r0"], what="r0 started")
        await eventually(
            lambda: metrics.queue_depths.get(("workflow", "imports")) == 2, what="depth 2"
        )
        backend.clock.advance(7)
        await eng.signal("r0", "go")
        await eventually(lambda: started == ["r0", "r1"], what="r1 started")
        await eventually(
            lambda: metrics.queue_depths.get(("workflow", "imports")) == 1, what="depth 1"
        )
        latency = metrics.dispatch_latency
        assert latency.count(kind="workflow", queue="imports") == 2
        assert latency.total(kind="workflow", queue="imports") == pytest.approx(7, abs=0.01)
        text = metrics.prometheus_text()
        assert 'pyweft_queue_depth{kind="workflow",queue="imports"} 1.0' in text
        assert 'pyweft_queue_dispatch_latency_seconds_count{kind="workflow",queue="imports"}' in (
            text
        )
        assert "r0" not in text and "r1" not in text  # ids never become labels
        for name in ("r1", "r2"):
            await eventually(lambda n=name: n in started, what=f"{name} started")
            await eng.signal(name, "go")


@activity(queue="far")
async def blocked(x: int) -> int:
    started.append(f"far{x}")
    await asyncio.wait_for(gate[0].wait(), 10)
    return x


@workflow
async def remote(ctx: WorkflowContext, x: int) -> int:
    return await ctx.run(blocked, x)


async def test_task_queue_depth_and_dispatch_latency_on_a_worker() -> None:
    clock = VirtualClock(at("2026-01-01T00:00:00"))
    storage = MemoryStorage()
    metrics = MetricsInterceptor()
    async with Engine(
        storage,
        workflows=[remote],
        activities=[blocked],
        clock=clock,
        serve_queues=[],
        poll_interval=0.05,
    ) as eng:
        handles = [await eng.start(remote, i, id=f"t{i}") for i in range(3)]
        await eventually(lambda: _ready(storage, 3), what="three tasks")
        clock.advance(5)  # the tasks wait 5 s for a worker
        worker = Worker(
            storage,
            activities=[blocked],
            queues=["far"],
            concurrency=1,
            clock=clock,
            poll_interval=0.05,
            interceptors=[metrics],
        )
        async with worker:
            await eventually(lambda: len(started) == 1, what="one task claimed")
            await worker.heartbeat()
            assert metrics.queue_depths[("activity", "far")] == 2
            gate[0].set()
            assert sorted([await h.result(timeout=10) for h in handles]) == [0, 1, 2]
            await worker.heartbeat()
            assert metrics.queue_depths[("activity", "far")] == 0
        latency = metrics.dispatch_latency
        assert latency.count(kind="activity", queue="far") == 3
        assert latency.total(kind="activity", queue="far") == pytest.approx(15, abs=0.01)
        assert metrics.activity_attempts.value(activity="blocked", outcome="ok") == 3


async def _ready(storage: MemoryStorage, n: int) -> bool:
    return len(await storage.scan("tk:q:far:")) == n


@workflow(name="tick")
async def tick(ctx: WorkflowContext) -> str:
    return "tock"


async def test_schedule_lag_and_scheduled_runs_counted_as_started() -> None:
    clock = VirtualClock(at("2026-01-01T00:00:00"))
    metrics = MetricsInterceptor()
    async with Engine(
        MemoryStorage(), workflows=[tick], clock=clock, interceptors=[metrics]
    ) as engine:
        await engine.create_schedule("every-10s", tick, every="10s")
        # Time moves in 4 s steps: the 10 s and 30 s occurrences start 2 s late, the
        # 20 s one on time.
        await advance(engine, clock, 33, step=4)
        await engine.start(tick, id="by-hand")
        await engine.schedules.trigger("every-10s")  # started, no lag
    assert metrics.schedule_runs.value(workflow_type="tick") == 4
    assert metrics.runs_started.value(workflow_type="tick") == 5
    assert metrics.schedule_lag.count(workflow_type="tick") == 3
    assert metrics.schedule_lag.total(workflow_type="tick") == pytest.approx(4)
    text = metrics.prometheus_text()
    assert 'pyweft_schedule_lag_seconds_count{workflow_type="tick"} 3.0' in text
    assert "every-10s" not in text


def test_the_same_measurements_through_opentelemetry_instruments() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    metrics = MetricsInterceptor(meter_provider=MeterProvider(metric_readers=[reader]))
    metrics.observe_queue_depth("activity", "far", 4)
    metrics.observe_dispatch("workflow", "imports", 1.5)
    metrics.observe_schedule_fired("tick", 2.0)
    metrics.observe_schedule_fired("tick", None)
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[Any]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                points[m.name] = list(m.data.data_points)
    [depth] = points["pyweft.queue.depth"]
    assert depth.value == 4 and dict(depth.attributes) == {"kind": "activity", "queue": "far"}
    [latency] = points["pyweft.queue.dispatch_latency"]
    assert (latency.count, latency.sum) == (1, 1.5)
    [started] = points["pyweft.schedule.started"]
    assert started.value == 2
    [lag] = points["pyweft.schedule.lag"]
    assert (lag.count, lag.sum) == (1, 2.0)
    [runs] = points["pyweft.workflow.started"]
    assert runs.value == 2
