"""Issue 19 on worker processes: a run's headers reach the attempts a Worker runs, its
``execute_activity`` interceptors wrap them, and a trace context in the headers parents
the worker's activity span (engine and worker on one store, each its own connection)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pyweft import (
    ApplicationError,
    ConfigurationError,
    Engine,
    RetryPolicy,
    SystemClock,
    Worker,
    WorkflowContext,
    activity,
    activity_context,
    workflow,
)
from pyweft.engine.tasks import records as tr
from pyweft.observability import ActivityInput, Interceptor, current_headers
from pyweft.observability.metrics import MetricsInterceptor
from pyweft.observability.otel import TracingInterceptor
from support.backends import Backend
from support.poll import eventually

seen: list[tuple[str, dict[str, str], int]] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    seen.clear()


@activity(queue="far")
async def far_async(x: int) -> int:
    seen.append(("async", dict(current_headers()), activity_context().attempt))
    return x + 1


@activity(queue="far")
def far_thread(x: int) -> int:
    seen.append(("thread", dict(current_headers()), activity_context().attempt))
    return x * 10


@activity(queue="far", retry=RetryPolicy(max_attempts=3, initial_interval=0.01))
async def far_flaky(x: int) -> int:
    attempt = activity_context().attempt
    seen.append(("flaky", dict(current_headers()), attempt))
    if attempt < 2:
        raise ApplicationError("not yet", type="NotYet")
    return x


@workflow
async def both(ctx: WorkflowContext, x: int) -> list[int]:
    return [await ctx.run(far_async, x), await ctx.run(far_thread, x)]


@workflow
async def flaky(ctx: WorkflowContext, x: int) -> int:
    return await ctx.run(far_flaky, x)


ACTS = [far_async, far_thread, far_flaky]


class Recorder(Interceptor):
    """Records each attempt it wraps and its outcome; doubles the argument of ``far_async``."""

    def __init__(self, name: str, log: list[Any]) -> None:
        self.name, self.log = name, log

    async def execute_activity(
        self, input: ActivityInput, next: Callable[[ActivityInput], Awaitable[Any]]
    ) -> Any:
        self.log.append((self.name, "in", input.activity, input.attempt, dict(input.headers)))
        if self.name == "outer" and input.activity == "far_async":
            input = dataclasses.replace(input, args=(input.args[0] * 2,))
        try:
            value = await next(input)
        except Exception as exc:
            self.log.append((self.name, "error", type(exc).__name__))
            raise
        self.log.append((self.name, "out", value))
        return value


def make_engine(backend: Backend, **kw: Any) -> Engine:
    return backend.engine(
        workflows=[both, flaky],
        activities=ACTS,
        clock=SystemClock(),
        poll_interval=0.05,
        serve_queues=["default"],
        **kw,
    )


def make_worker(storage: Any, **kw: Any) -> Worker:
    return Worker(storage, activities=ACTS, queues=["far"], poll_interval=0.05, **kw)


async def test_headers_reach_a_workers_attempts_and_its_interceptors(backend: Backend) -> None:
    log: list[Any] = []
    heads = {"tenant": "acme", "request-id": "r-7"}
    async with make_engine(backend) as eng:
        handle = await eng.start(both, 3, id="b1", headers=heads)
        # The task record carries the run's headers.
        await eventually(lambda: _task_headers(eng), what="a task record")
        assert await _task_headers(eng) == [heads]
        interceptors = [Recorder("outer", log), Recorder("inner", log)]
        async with make_worker(backend.storage(), interceptors=interceptors):
            assert await handle.result(timeout=10) == [7, 30]  # far_async got 3 * 2
    assert seen == [("async", heads, 1), ("thread", heads, 1)]
    assert log == [
        ("outer", "in", "far_async", 1, heads),
        ("inner", "in", "far_async", 1, heads),
        ("inner", "out", 7),
        ("outer", "out", 7),
        ("outer", "in", "far_thread", 1, heads),
        ("inner", "in", "far_thread", 1, heads),
        ("inner", "out", 30),
        ("outer", "out", 30),
    ]


async def _task_headers(eng: Engine) -> list[dict[str, str] | None]:
    found = await eng._core.storage.scan(tr.TASK_PREFIX)
    return [tr.decode_task(raw).headers for _, raw in found]


async def test_each_retry_is_its_own_interceptor_call_and_metrics_count_it(
    tmp_path: Path,
) -> None:
    log: list[Any] = []
    metrics = MetricsInterceptor()
    url = f"sqlite:///{tmp_path / 'w.db'}"
    async with (
        Engine(url, workflows=[flaky], activities=ACTS, poll_interval=0.05, serve_queues=[]) as eng,
        make_worker(url, interceptors=[Recorder("only", log), metrics]),
    ):
        assert await (await eng.start(flaky, 5, id="f1")).result(timeout=10) == 5
    assert [e for e in log if e[1] != "out"] == [
        ("only", "in", "far_flaky", 1, {}),
        ("only", "error", "ApplicationError"),
        ("only", "in", "far_flaky", 2, {}),
    ]
    assert metrics.activity_attempts.value(activity="far_flaky", outcome="error") == 1
    assert metrics.activity_attempts.value(activity="far_flaky", outcome="ok") == 1
    assert metrics.activity_retries.value(activity="far_flaky") == 1
    assert "pyweft_activity_attempts" in metrics.prometheus_text()


async def test_a_worker_without_headers_or_interceptors_sees_empty_headers(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'w.db'}"
    async with (
        Engine(url, workflows=[both], activities=ACTS, poll_interval=0.05, serve_queues=[]) as eng,
        make_worker(url),
    ):
        assert await (await eng.start(both, 1, id="e1")).result(timeout=10) == [2, 10]
    assert seen == [("async", {}, 1), ("thread", {}, 1)]


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


async def test_the_trace_context_in_headers_parents_the_workers_activity_span(
    tmp_path: Path, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    url = f"sqlite:///{tmp_path / 'w.db'}"
    async with (
        Engine(
            url,
            workflows=[both],
            activities=ACTS,
            poll_interval=0.05,
            serve_queues=[],
            interceptors=[TracingInterceptor(provider)],
        ) as eng,
        make_worker(url, interceptors=[TracingInterceptor(provider)]),
    ):
        assert await (await eng.start(both, 1, id="t1")).result(timeout=10) == [2, 10]
    named = {s.name: s for s in exporter.get_finished_spans()}
    start = named["start both"]
    for name in ("activity far_async", "activity far_thread"):
        span = named[name]
        assert span.context is not None and start.context is not None
        assert span.context.trace_id == start.context.trace_id
        assert span.parent is not None and span.parent.span_id == start.context.span_id
        assert span.attributes is not None and span.attributes["pyweft.workflow_id"] == "t1"


def test_worker_interceptors_are_checked() -> None:
    with pytest.raises(ConfigurationError, match=r"not a pyweft\.Interceptor.*instance"):
        Worker(None, activities=ACTS, interceptors=[Recorder])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="wrap a single one in a list"):
        Worker(None, activities=ACTS, interceptors=Recorder("x", []))  # type: ignore[arg-type]
