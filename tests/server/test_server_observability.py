"""The server and observability: /metrics includes the engine's metrics_text() (its
gauges and what a MetricsInterceptor counts); headers and the caller's trace context
travel from an HTTP client into the run."""

from __future__ import annotations

import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pyweft import Engine, MemoryStorage, WorkflowContext, workflow
from pyweft.client import Client
from pyweft.observability.metrics import MetricsInterceptor
from pyweft.observability.otel import TracingInterceptor, inject_headers
from pyweft.server import ServerAuth, create_app

from .conftest import WORKFLOWS, add_three

API = "/api/v1"


async def test_metrics_include_the_engine_interceptor_metrics() -> None:
    metrics = MetricsInterceptor()
    async with Engine(MemoryStorage(), workflows=WORKFLOWS, interceptors=[metrics]) as engine:
        assert await (await engine.start(add_three, 1, id="m-1")).result(timeout=5) == 4
        app = create_app(engine, auth=ServerAuth())
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://testserver"
            ) as http,
        ):
            response = await http.get(f"{API}/metrics")
    assert response.status_code == 200
    text = response.text
    assert 'pyweft_runs_started_total{workflow_type="add_three"} 1.0' in text
    assert 'pyweft_runs_ended_total{status="completed",workflow_type="add_three"} 1.0' in text
    assert 'pyweft_lease_state{state="no-lease"} 1.0' in text
    assert "pyweft_http_request_duration_seconds" in text
    assert "m-1" not in text


@workflow
async def echo_headers(ctx: WorkflowContext) -> dict[str, str]:
    return dict(ctx.headers)


async def test_headers_and_trace_context_travel_from_an_http_client() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with Engine(
        MemoryStorage(), workflows=[echo_headers], interceptors=[TracingInterceptor(provider)]
    ) as engine:
        app = create_app(engine)
        async with (
            app.router.lifespan_context(app),
            Client("http://testserver", transport=httpx.ASGITransport(app=app)) as client,
        ):
            with provider.get_tracer("caller").start_as_current_span("client call") as caller:
                sent = inject_headers({"tenant": "acme"})
                handle = await client.start("echo_headers", headers=sent)
            got = await handle.result(timeout=5)
    trace_id = caller.get_span_context().trace_id
    assert got["tenant"] == "acme"
    assert got["traceparent"].split("-")[1] == f"{trace_id:032x}"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans["start echo_headers"].parent.span_id == caller.get_span_context().span_id
    assert spans["run echo_headers"].context.trace_id == trace_id


async def test_bad_headers_over_http_are_a_400() -> None:
    async with Engine(MemoryStorage(), workflows=[echo_headers]) as engine:
        app = create_app(engine)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://testserver"
            ) as http,
        ):
            response = await http.post(
                f"{API}/workflows", json={"type": "echo_headers", "headers": {"n": 1}}
            )
            listed = await engine.list()
    assert response.status_code == 400
    assert "must be a string" in response.text
    assert listed.items == []
