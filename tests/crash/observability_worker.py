"""A process for test_sigkill_observability: ``first`` starts a traced run with headers
and hangs in its signal wait (to be SIGKILLed); ``resume`` recovers it and finishes it.

    python observability_worker.py DB NOTES SPANS first|resume

Activities append ``{"label", "headers"}`` lines to NOTES; every finished span is
appended to SPANS as one JSON line, written as it ends (so a kill loses none of those).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from pyweft import Engine, WorkflowContext, activity, workflow
from pyweft.observability import current_headers
from pyweft.observability.otel import TracingInterceptor

DB, NOTES, SPANS, MODE = sys.argv[1:5]


def _append(path: str, record: dict[str, object]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


class FileExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            ctx = span.get_span_context()
            assert ctx is not None
            _append(
                SPANS,
                {
                    "pid": os.getpid(),
                    "name": span.name,
                    "trace_id": f"{ctx.trace_id:032x}",
                    "span_id": f"{ctx.span_id:016x}",
                    "parent_id": None if span.parent is None else f"{span.parent.span_id:016x}",
                    "links": [f"{link.context.span_id:016x}" for link in span.links],
                    "attributes": dict(span.attributes or {}),
                },
            )
        return SpanExportResult.SUCCESS


@activity
def note(label: str) -> None:
    _append(NOTES, {"label": label, "headers": dict(current_headers())})


@workflow
async def kid(ctx: WorkflowContext) -> str:
    await ctx.run(note, "child")
    return ctx.headers["tenant"]


@workflow
async def relay(ctx: WorkflowContext) -> str:
    await ctx.run(note, "before")
    tenant = await ctx.start_child(kid, id="relay-kid")
    await ctx.wait_for_signal("go")
    await ctx.run(note, "after")
    return f"{tenant}/{ctx.headers['tenant']}"


async def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    tracing = TracingInterceptor(provider)
    async with Engine(f"sqlite:///{DB}", workflows=[relay, kid], interceptors=[tracing]) as e:
        if MODE == "first":
            with provider.get_tracer("caller").start_as_current_span("caller"):
                await e.start(relay, id="relay", headers={"tenant": "t-7"})
            await asyncio.Event().wait()  # until SIGKILL
        await e.signal("relay", "go")
        print(json.dumps(await e.get_handle("relay").result(timeout=30)), flush=True)


asyncio.run(main())
