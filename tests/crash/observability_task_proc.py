"""A process for test_sigkill_task_headers: ``engine`` starts a traced run with headers
whose one activity runs on a worker and waits for its result; ``worker`` serves that
queue. The activity's first attempt hangs (its worker is SIGKILLed); the retry runs on
another worker.

    python observability_task_proc.py engine|worker DB NOTES SPANS

Attempts append ``{"pid", "attempt", "headers"}`` lines to NOTES; finished spans are
appended to SPANS as JSON lines as they end.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from pyweft import (
    Engine,
    RetryPolicy,
    Worker,
    WorkflowContext,
    activity,
    activity_context,
    workflow,
)
from pyweft.observability import current_headers
from pyweft.observability.otel import TracingInterceptor

MODE, DB, NOTES, SPANS = sys.argv[1:5]


def _append(path: str, record: object) -> None:
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
                },
            )
        return SpanExportResult.SUCCESS


@activity(
    queue="far",
    visibility_timeout=1,
    retry=RetryPolicy(max_attempts=3, initial_interval=0.01),
)
async def hold(x: int) -> int:
    attempt = activity_context().attempt
    _append(NOTES, {"pid": os.getpid(), "attempt": attempt, "headers": dict(current_headers())})
    if attempt == 1:
        await asyncio.sleep(60)  # killed in here
    return x + 1


@workflow
async def far(ctx: WorkflowContext, x: int) -> int:
    return await ctx.run(hold, x)


async def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    tracing = TracingInterceptor(provider)
    url = f"sqlite:///{DB}"
    if MODE == "worker":
        worker = Worker(
            url,
            activities=[hold],
            queues=["far"],
            poll_interval=0.05,
            heartbeat_interval=0.2,
            interceptors=[tracing],
        )
        await worker.run()
        return
    async with Engine(
        url,
        workflows=[far],
        activities=[hold],
        serve_queues=[],
        poll_interval=0.05,
        interceptors=[tracing],
    ) as engine:
        handle = await engine.start(far, 1, id="far-1", headers={"tenant": "t-9"})
        print(json.dumps(await handle.result(timeout=60)))


asyncio.run(main())
