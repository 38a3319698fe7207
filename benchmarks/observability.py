"""Cost of interceptors on the sequential no-op benchmark (issue 19 targets).

    .venv/bin/python benchmarks/observability.py [--steps 3000] [--runs 5]
    PYTHONPATH=/path/to/other/src python benchmarks/observability.py --only-none

One workflow running ``--steps`` no-op activities in a row on SQLite (FULL), under:
no interceptors; an interceptor that overrides nothing (the chain skips it); OTel
tracing (TracingInterceptor, SDK tracer, BatchSpanProcessor into a discarding
exporter); MetricsInterceptor. Configurations are interleaved run by run so machine
load hits them alike. Prints steps/s (median of runs), CPU time per step, and Python
function calls per step on the memory store (independent of machine load).
``--only-none`` measures just the plain engine (for comparing against another tree).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workloads import sequential

from pyweft import Engine


def configurations(only_none: bool) -> dict[str, Callable[[], list[Any]]]:
    configs: dict[str, Callable[[], list[Any]]] = {"none": list}
    if only_none:
        return configs
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from pyweft.observability import Interceptor
    from pyweft.observability.metrics import MetricsInterceptor
    from pyweft.observability.otel import TracingInterceptor

    class Discard(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    def tracing() -> list[Any]:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Discard()))
        return [TracingInterceptor(provider)]

    configs["pass-through"] = lambda: [Interceptor()]
    configs["otel tracing"] = tracing
    configs["metrics"] = lambda: [MetricsInterceptor()]
    return configs


async def run_once(url: str, steps: int, interceptors: list[Any]) -> tuple[float, float]:
    kwargs: dict[str, Any] = {"interceptors": interceptors} if interceptors else {}
    async with Engine(url, workflows=[sequential], **kwargs) as engine:
        c0, t0 = time.process_time(), time.perf_counter()
        await (await engine.start(sequential, steps)).result()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return steps / wall, cpu / steps * 1e6


async def calls_per_step(steps: int, interceptors: list[Any]) -> float:
    kwargs: dict[str, Any] = {"interceptors": interceptors} if interceptors else {}
    async with Engine("memory://", workflows=[sequential], **kwargs) as engine:
        profile = cProfile.Profile()
        profile.enable()
        await (await engine.start(sequential, steps)).result()
        profile.disable()
    return float(pstats.Stats(profile).total_calls) / steps  # type: ignore[attr-defined]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only-none", action="store_true")
    args = parser.parse_args()
    configs = configurations(args.only_none)
    rates: dict[str, list[float]] = {name: [] for name in configs}
    cpus: dict[str, list[float]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.runs):
            for name, make in configs.items():
                gc.collect()
                url = f"sqlite:///{Path(d) / f'{i}-{len(rates[name])}-{name[:4]}'}.db"
                rate, cpu = await run_once(url + "?synchronous=FULL", args.steps, make())
                rates[name].append(rate)
                cpus[name].append(cpu)
    base_rate = statistics.median(rates["none"])
    base_cpu = statistics.median(cpus["none"])
    print(f"sequential no-op activities, SQLite FULL, {args.steps} steps, {args.runs} runs each")
    for name in configs:
        rate, cpu = statistics.median(rates[name]), statistics.median(cpus[name])
        calls = await calls_per_step(min(args.steps, 2_000), configs[name]())
        print(
            f"  {name:13} {rate:7,.0f} steps/s ({(rate / base_rate - 1) * 100:+5.1f}%), "
            f"CPU {cpu:6.1f} us/step ({(cpu / base_cpu - 1) * 100:+5.1f}%), "
            f"{calls:6.1f} calls/step; runs: {', '.join(f'{r:,.0f}' for r in rates[name])}"
        )


if __name__ == "__main__":
    asyncio.run(main())
