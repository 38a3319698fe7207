"""Prometheus metrics for one app: requests by route and status, their latency, and the
engine's own counters. Served at ``/api/v1/metrics`` in the text exposition format."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from pyweft import Engine


class ServerMetrics:
    def __init__(self, engine: Engine) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._engine = engine
        self.requests = Counter(
            "pyweft_http_requests",
            "HTTP requests answered, by route, method and status.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "pyweft_http_request_duration_seconds",
            "Time to answer an HTTP request (streams: time to the first byte).",
            ["route", "method"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60),
        )
        self.auth_failures = Counter(
            "pyweft_http_auth_failures",
            "Requests refused by authentication (401) or authorisation (403).",
            ["status"],
            registry=self.registry,
        )
        self._runs = Gauge(
            "pyweft_engine_runs_driven", "Runs this engine drives now.", registry=self.registry
        )
        self._storage_failures = Gauge(
            "pyweft_engine_storage_failures",
            "Storage failures that stopped a run here (re-driven later).",
            registry=self.registry,
        )
        self._redriven = Gauge(
            "pyweft_engine_runs_redriven",
            "Runs re-driven after a storage failure.",
            registry=self.registry,
        )

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)
        if status in (401, 403):
            self.auth_failures.labels(str(status)).inc()

    def render(self) -> bytes:
        stats = self._engine.stats()
        self._runs.set(stats.runs_driven)
        self._storage_failures.set(stats.storage_failures)
        self._redriven.set(stats.redriven)
        return generate_latest(self.registry)
