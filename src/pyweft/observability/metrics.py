"""Metrics: :class:`MetricsInterceptor` counts what runs and activities do, and shows it
as Prometheus text (``engine.metrics_text()``, the server's ``/metrics``) and, given a
``meter_provider``, through the OpenTelemetry metrics API as well.

Labels are low-cardinality by construction: workflow type, activity name, status,
failure category, outcome. Ids never become labels.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from pyweft.observability.interceptors import (
    ActivityInput,
    CompletionInput,
    Interceptor,
    StartInput,
)

DURATION_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 86400,
)  # fmt: skip
COMMIT_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1,
)  # fmt: skip

Labels = tuple[tuple[str, str], ...]


class Counter:
    def __init__(self, name: str, help: str) -> None:
        self.name, self.help = name, help
        self.values: dict[Labels, float] = {}
        self._lock = threading.Lock()

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            self.values[key] = self.values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        return self.values.get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name}_total {self.help}"
        yield f"# TYPE {self.name}_total counter"
        for key, value in sorted(self.values.items()):
            yield f"{self.name}_total{_labels(key)} {_num(value)}"


class Histogram:
    def __init__(self, name: str, help: str, buckets: Sequence[float]) -> None:
        self.name, self.help, self.buckets = name, help, tuple(buckets)
        self.series: dict[Labels, list[float]] = {}  # bucket counts..., sum, count
        self._lock = threading.Lock()

    def observe(self, value: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            row = self.series.get(key)
            if row is None:
                row = self.series[key] = [0.0] * (len(self.buckets) + 2)
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    row[i] += 1
            row[-2] += value
            row[-1] += 1

    def count(self, **labels: str) -> int:
        row = self.series.get(tuple(sorted(labels.items())))
        return 0 if row is None else int(row[-1])

    def total(self, **labels: str) -> float:
        """The sum of the values observed with ``labels``."""
        row = self.series.get(tuple(sorted(labels.items())))
        return 0.0 if row is None else row[-2]

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} histogram"
        for key, row in sorted(self.series.items()):
            for bound, n in zip(self.buckets, row, strict=False):
                yield f"{self.name}_bucket{_labels((*key, ('le', _num(bound))))} {_num(n)}"
            yield f"{self.name}_bucket{_labels((*key, ('le', '+Inf')))} {_num(row[-1])}"
            yield f"{self.name}_sum{_labels(key)} {_num(row[-2])}"
            yield f"{self.name}_count{_labels(key)} {_num(row[-1])}"


def gauge_lines(name: str, help: str, samples: Iterable[tuple[Labels, float]]) -> list[str]:
    lines = [f"# HELP {name} {help}", f"# TYPE {name} gauge"]
    lines += [f"{name}{_labels(key)} {_num(value)}" for key, value in samples]
    return lines


def _labels(key: Labels) -> str:
    if not key:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in key)
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class MetricsInterceptor(Interceptor):
    """Counts runs started/completed/failed/blocked by type (failed also by category),
    run durations, activity attempts, retries and durations, storage commit latency,
    queue depth and dispatch latency (workflow queues and activity task queues), and
    schedule lag (runs started by schedules count as started too).

    Register it with ``Engine(interceptors=[MetricsInterceptor()])``; read it with
    ``engine.metrics_text()``. Pass ``meter_provider`` (extra ``pyweft[otel]``) to
    record the same through OpenTelemetry instruments too.
    """

    def __init__(self, *, meter_provider: Any = None) -> None:
        self.runs_started = Counter("pyweft_runs_started", "Runs started, by workflow type.")
        self.runs_ended = Counter(
            "pyweft_runs_ended", "Runs that reached a terminal status, by type and status."
        )
        self.runs_failed = Counter(
            "pyweft_runs_failed",
            "Runs that failed, timed out or were cancelled, by type and failure category.",
        )
        self.runs_blocked = Counter(
            "pyweft_runs_blocked", "Runs blocked because their code no longer replays them."
        )
        self.run_duration = Histogram(
            "pyweft_run_duration_seconds",
            "Time from a run's creation to its end, by type and status.",
            DURATION_BUCKETS,
        )
        self.activity_attempts = Counter(
            "pyweft_activity_attempts", "Activity attempts, by activity and outcome."
        )
        self.activity_retries = Counter(
            "pyweft_activity_retries", "Activity attempts after the first, by activity."
        )
        self.activity_duration = Histogram(
            "pyweft_activity_attempt_duration_seconds",
            "Wall time of one activity attempt, by activity.",
            DURATION_BUCKETS,
        )
        self.commit_latency = Histogram(
            "pyweft_storage_commit_seconds",
            "Time for one engine write (a batch) to commit in the store.",
            COMMIT_BUCKETS,
        )
        self.dispatch_latency = Histogram(
            "pyweft_queue_dispatch_latency_seconds",
            "Time work waited in a queue before it started, by kind (workflow: a workflow "
            "queue's run, from enqueue to dispatch; activity: a task, from its write to a "
            "worker's claim) and queue.",
            DURATION_BUCKETS,
        )
        self.schedule_runs = Counter(
            "pyweft_schedule_runs_started", "Runs started by schedules, by workflow type."
        )
        self.schedule_lag = Histogram(
            "pyweft_schedule_lag_seconds",
            "Time from a schedule occurrence's nominal time to its run's start, by type.",
            DURATION_BUCKETS,
        )
        # (kind, queue) -> waiting now, as last read (workflow queues by the engine each
        # poll interval; activity task queues by a worker at each heartbeat).
        self.queue_depths: dict[tuple[str, str], int] = {}
        self._otel = None if meter_provider is None else _OtelInstruments(meter_provider, self)

    async def start(self, input: StartInput, next: Callable[[StartInput], Awaitable[str]]) -> str:
        workflow_id = await next(input)
        self.runs_started.inc(workflow_type=input.workflow_type)
        if self._otel is not None:
            self._otel.started.add(1, {"workflow_type": input.workflow_type})
        return workflow_id

    def workflow_completed(self, input: CompletionInput) -> None:
        kind = input.workflow_type
        if input.status == "blocked":
            self.runs_blocked.inc(workflow_type=kind)
        else:
            self.runs_ended.inc(workflow_type=kind, status=input.status)
            self.run_duration.observe(input.duration_s, workflow_type=kind, status=input.status)
        if input.failure_category is not None and input.status != "blocked":
            self.runs_failed.inc(workflow_type=kind, failure_category=input.failure_category)
        if self._otel is not None:
            self._otel.completed(input)

    async def execute_activity(
        self, input: ActivityInput, next: Callable[[ActivityInput], Awaitable[Any]]
    ) -> Any:
        if input.attempt > 1:
            self.activity_retries.inc(activity=input.activity)
        began = time.perf_counter()
        outcome = "error"
        try:
            value = await next(input)
            outcome = "ok"
            return value
        finally:
            took = time.perf_counter() - began
            self.activity_attempts.inc(activity=input.activity, outcome=outcome)
            self.activity_duration.observe(took, activity=input.activity)
            if self._otel is not None:
                self._otel.attempt(input, outcome, took)

    def observe_commit(self, seconds: float) -> None:
        """Called by the engine after each write it commits."""
        self.commit_latency.observe(seconds)
        if self._otel is not None:
            self._otel.commit.record(seconds)

    def observe_dispatch(self, kind: str, queue: str, seconds: float) -> None:
        """Told by the engine (workflow queues) and a worker (activity task queues)."""
        self.dispatch_latency.observe(seconds, kind=kind, queue=queue)
        if self._otel is not None:
            self._otel.dispatch.record(seconds, {"kind": kind, "queue": queue})

    def observe_queue_depth(self, kind: str, queue: str, depth: int) -> None:
        self.queue_depths[(kind, queue)] = depth

    def observe_schedule_fired(self, workflow_type: str, lag_s: float | None) -> None:
        """A schedule started a run: counted in ``runs_started`` too. ``lag_s`` is
        ``None`` for a backfill (its occurrences are in the past on purpose)."""
        self.runs_started.inc(workflow_type=workflow_type)
        self.schedule_runs.inc(workflow_type=workflow_type)
        if lag_s is not None:
            self.schedule_lag.observe(lag_s, workflow_type=workflow_type)
        if self._otel is not None:
            kind = {"workflow_type": workflow_type}
            self._otel.started.add(1, kind)
            self._otel.schedule_runs.add(1, kind)
            if lag_s is not None:
                self._otel.schedule_lag.record(lag_s, kind)

    def prometheus_text(self) -> str:
        lines: list[str] = []
        for metric in (
            self.runs_started,
            self.runs_ended,
            self.runs_failed,
            self.runs_blocked,
            self.run_duration,
            self.activity_attempts,
            self.activity_retries,
            self.activity_duration,
            self.commit_latency,
            self.dispatch_latency,
            self.schedule_runs,
            self.schedule_lag,
        ):
            lines += metric.render()
        depths = sorted(self.queue_depths.items())
        lines += gauge_lines(
            "pyweft_queue_depth",
            "Work waiting in a queue when last read, by kind (workflow, activity) and queue.",
            [((("kind", k), ("queue", q)), float(n)) for (k, q), n in depths],
        )
        return "\n".join(lines) + "\n"


class _OtelInstruments:
    """The same measurements through the OpenTelemetry metrics API."""

    def __init__(self, meter_provider: Any, owner: MetricsInterceptor) -> None:
        meter = meter_provider.get_meter("pyweft")
        self.started = meter.create_counter("pyweft.workflow.started", unit="{run}")
        self.ended = meter.create_counter("pyweft.workflow.completed", unit="{run}")
        self.failed = meter.create_counter("pyweft.workflow.failed", unit="{run}")
        self.blocked = meter.create_counter("pyweft.workflow.blocked", unit="{run}")
        self.duration = meter.create_histogram("pyweft.workflow.duration", unit="s")
        self.attempts = meter.create_counter("pyweft.activity.attempts", unit="{attempt}")
        self.retries = meter.create_counter("pyweft.activity.retries", unit="{attempt}")
        self.activity_duration = meter.create_histogram("pyweft.activity.duration", unit="s")
        self.commit = meter.create_histogram("pyweft.storage.commit_duration", unit="s")
        self.dispatch = meter.create_histogram("pyweft.queue.dispatch_latency", unit="s")
        self.schedule_runs = meter.create_counter("pyweft.schedule.started", unit="{run}")
        self.schedule_lag = meter.create_histogram("pyweft.schedule.lag", unit="s")

        def depths(options: Any) -> Iterable[Any]:
            from opentelemetry.metrics import Observation

            for (kind, queue), depth in list(owner.queue_depths.items()):
                yield Observation(depth, {"kind": kind, "queue": queue})

        meter.create_observable_gauge("pyweft.queue.depth", callbacks=[depths], unit="{item}")

    def completed(self, input: CompletionInput) -> None:
        kind = {"workflow_type": input.workflow_type}
        if input.status == "blocked":
            self.blocked.add(1, kind)
            return
        self.ended.add(1, {**kind, "status": input.status})
        self.duration.record(input.duration_s, {**kind, "status": input.status})
        if input.failure_category is not None:
            self.failed.add(1, {**kind, "failure_category": input.failure_category})

    def attempt(self, input: ActivityInput, outcome: str, took: float) -> None:
        self.attempts.add(1, {"activity": input.activity, "outcome": outcome})
        if input.attempt > 1:
            self.retries.add(1, {"activity": input.activity})
        self.activity_duration.record(took, {"activity": input.activity})
