"""OpenTelemetry spans from TracingInterceptor: their tree, W3C context in headers, and a
run resumed after a restart continuing its trace (in-memory exporter)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pyweft import WorkflowContext, activity, workflow
from pyweft.observability.otel import TracingInterceptor, inject_headers
from support.backends import Backend
from support.poll import eventually


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@activity
async def greet(name: str) -> str:
    return f"hi {name}"


@workflow
async def little(ctx: WorkflowContext) -> str:
    return "small"


@workflow
async def traced(ctx: WorkflowContext) -> dict[str, Any]:
    count = {"n": 0}
    ctx.on_query("n", lambda: count["n"])
    text = await ctx.run(greet, "ada")
    await ctx.sleep(0)
    child = await ctx.start_child(little)
    count["n"] = 1
    await ctx.wait_for_signal("go")
    return {"text": text, "child": child, "traceparent": ctx.headers.get("traceparent")}


def by_name(exported: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in exported:
        out.setdefault(span.name, []).append(span)
    return out


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


async def test_spans_form_one_trace_from_caller_to_child(
    backend: Backend, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    tracer = provider.get_tracer("caller")
    async with backend.engine(
        workflows=[traced, little], interceptors=[TracingInterceptor(provider)]
    ) as engine:
        with tracer.start_as_current_span("http request") as caller:
            handle = await engine.start(traced, id="t1")

        async def past_the_child() -> bool:
            return len(await engine.history("t1")) >= 3 and await engine.query("t1", "n") == 1

        await eventually(past_the_child, what="the run to pass its child")
        await engine.signal("t1", "go")
        result = await handle.result(timeout=5)
    got = by_name(exporter.get_finished_spans())
    trace_id = caller.get_span_context().trace_id
    # Everything but the query (the querying caller's own trace) is in the caller's trace.
    assert {s.context.trace_id for s in exporter.get_finished_spans() if s.name != "query n"} == {
        trace_id
    }
    start = got["start traced"][0]
    run = got["run traced"][0]
    assert parent_of(start) == caller.get_span_context().span_id
    assert parent_of(run) == start.context.span_id
    assert start.attributes["pyweft.workflow_id"] == "t1"
    assert run.attributes["pyweft.resumed"] is False
    assert parent_of(got["activity greet"][0]) == run.context.span_id
    assert got["activity greet"][0].attributes["pyweft.attempt"] == 1
    assert parent_of(got["sleep"][0]) == run.context.span_id
    child_op = got["child little"][0]
    assert parent_of(child_op) == run.context.span_id
    child_start = got["start little"][0]
    assert parent_of(child_start) == child_op.context.span_id
    assert parent_of(got["run little"][0]) == child_start.context.span_id
    assert parent_of(got["signal go"][0]) == run.context.span_id
    assert "query n" in got
    # The W3C context of the start span is what the run carries in its headers.
    version, trace_hex, span_hex, _flags = result["traceparent"].split("-")
    assert (version, trace_hex, span_hex) == (
        "00",
        f"{trace_id:032x}",
        f"{start.context.span_id:016x}",
    )


@workflow
async def napping(ctx: WorkflowContext) -> str:
    await ctx.run(greet, "al")  # replayed in the second life: no span there
    await ctx.sleep(60)
    return await ctx.run(greet, "bo")


async def test_a_resumed_run_continues_its_trace_with_a_link(
    backend: Backend, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    async with backend.engine(
        workflows=[napping], interceptors=[TracingInterceptor(provider)]
    ) as engine:
        await engine.start(napping, id="n1")
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep armed")
    async with backend.engine(
        workflows=[napping], interceptors=[TracingInterceptor(provider)]
    ) as engine:
        await eventually(lambda: backend.clock.pending_timers() == 1, what="sleep re-armed")
        backend.clock.advance(60)
        assert await engine.get_handle("n1").result(timeout=5) == "hi bo"
    got = by_name(exporter.get_finished_spans())
    start = got["start napping"][0]
    first, resumed = got["run napping"]
    assert first.attributes["pyweft.resumed"] is False
    assert resumed.attributes["pyweft.resumed"] is True
    assert resumed.context.trace_id == start.context.trace_id
    assert parent_of(resumed) == start.context.span_id
    assert [link.context.span_id for link in resumed.links] == [start.context.span_id]
    # The sleep was open at the restart: each life waited on it, in its own run span.
    assert [parent_of(s) for s in got["sleep"]] == [first.context.span_id, resumed.context.span_id]
    activities = [parent_of(s) for s in got["activity greet"]]
    assert activities == [first.context.span_id, resumed.context.span_id]


def test_inject_headers_gives_the_current_trace_context(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, _ = spans
    with provider.get_tracer("t").start_as_current_span("outer") as outer:
        headers = inject_headers({"tenant": "a"})
    assert headers["tenant"] == "a"
    assert headers["traceparent"].split("-")[1] == f"{outer.get_span_context().trace_id:032x}"
