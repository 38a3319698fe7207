"""MetricsInterceptor: values after a scripted workload, as Prometheus text and through
OpenTelemetry's in-memory metric reader; ids never appear as labels."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from pyweft import (
    RetryPolicy,
    WorkflowCancelledError,
    WorkflowContext,
    WorkflowFailedError,
    WorkflowTimeoutError,
    activity,
    workflow,
)
from pyweft.observability.metrics import MetricsInterceptor
from support.backends import Backend
from support.poll import eventually

attempts: list[int] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    attempts.clear()


@activity(retry=RetryPolicy(max_attempts=3, initial_interval=0))
async def twice_flaky() -> str:
    attempts.append(1)
    if len(attempts) < 3:
        raise RuntimeError("flaky")
    return "ok"


@activity(retry=RetryPolicy(max_attempts=1))
async def broken() -> None:
    raise ValueError("bad data")


@workflow
async def fine(ctx: WorkflowContext) -> str:
    return await ctx.run(twice_flaky)


@workflow
async def failing(ctx: WorkflowContext) -> None:
    await ctx.run(broken)


@workflow
async def slow(ctx: WorkflowContext) -> None:
    await ctx.sleep(3600)


async def test_metrics_after_a_scripted_workload(backend: Backend) -> None:
    reader = InMemoryMetricReader()
    metrics = MetricsInterceptor(meter_provider=MeterProvider(metric_readers=[reader]))
    async with backend.engine(workflows=[fine, failing, slow], interceptors=[metrics]) as engine:
        assert await (await engine.start(fine, id="run-fine")).result(timeout=5) == "ok"
        with pytest.raises(WorkflowFailedError):
            await (await engine.start(failing, id="run-failing")).result(timeout=5)
        timed = await engine.start(slow, id="run-timed", execution_timeout="10s")
        cancelled = await engine.start(slow, id="run-cancelled")
        await eventually(lambda: backend.clock.pending_timers() == 3, what="timers armed")
        await engine.cancel("run-cancelled")
        with pytest.raises(WorkflowCancelledError):
            await cancelled.result(timeout=5)
        backend.clock.advance(10)
        with pytest.raises(WorkflowTimeoutError):
            await timed.result(timeout=5)
        text = engine.metrics_text()

    assert metrics.runs_started.value(workflow_type="slow") == 2
    assert metrics.runs_ended.value(workflow_type="fine", status="completed") == 1
    assert metrics.runs_ended.value(workflow_type="failing", status="failed") == 1
    assert metrics.runs_ended.value(workflow_type="slow", status="timed_out") == 1
    assert metrics.runs_ended.value(workflow_type="slow", status="cancelled") == 1
    assert metrics.runs_failed.value(workflow_type="failing", failure_category="application") == 1
    assert metrics.runs_failed.value(workflow_type="slow", failure_category="timeout") == 1
    assert metrics.runs_failed.value(workflow_type="slow", failure_category="cancellation") == 1
    assert metrics.activity_attempts.value(activity="twice_flaky", outcome="error") == 2
    assert metrics.activity_attempts.value(activity="twice_flaky", outcome="ok") == 1
    assert metrics.activity_retries.value(activity="twice_flaky") == 2
    assert metrics.run_duration.count(workflow_type="slow", status="timed_out") == 1
    assert metrics.commit_latency.count() > 0

    assert 'pyweft_runs_started_total{workflow_type="slow"} 2.0' in text
    assert 'pyweft_runs_failed_total{failure_category="timeout",workflow_type="slow"} 1.0' in text
    bucket = 'pyweft_run_duration_seconds_bucket{status="timed_out",workflow_type="slow",le='
    assert f'{bucket}"5.0"}} 0.0' in text  # it ran 10 s (virtual clock)
    assert f'{bucket}"10.0"}} 1.0' in text
    assert "# TYPE pyweft_storage_commit_seconds histogram" in text
    assert 'pyweft_lease_state{state="no-lease"} 1.0' in text
    assert "pyweft_engine_runs_driven 0.0" in text
    for workflow_id in ("run-fine", "run-failing", "run-timed", "run-cancelled"):
        assert workflow_id not in text  # ids are never labels

    points = {
        (metric.name, tuple(sorted(point.attributes.items()))): point
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        for point in metric.data.data_points
    }
    started = points[("pyweft.workflow.started", (("workflow_type", "slow"),))]
    assert started.value == 2
    failed_key = (
        "pyweft.workflow.failed",
        (("failure_category", "timeout"), ("workflow_type", "slow")),
    )
    assert points[failed_key].value == 1
    retries = points[("pyweft.activity.retries", (("activity", "twice_flaky"),))]
    assert retries.value == 2
    assert points[("pyweft.storage.commit_duration", ())].count > 0


async def test_metrics_text_without_interceptors_has_the_engine_gauges(backend: Backend) -> None:
    async with backend.engine(workflows=[fine]) as engine:
        text = engine.metrics_text()
    assert "pyweft_engine_runs_driven 0.0" in text
    assert "pyweft_runs_started_total" not in text
