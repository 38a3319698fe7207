"""Prometheus metrics for one app: requests by route and status, their latency, and the
engine's own gauges and metrics (``engine.metrics_text()``). Served at
``/api/v1/metrics`` in the text exposition format."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from pyweft import Engine


class ServerMetrics:
    def __init__(self, engine: Engine) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
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

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        # labels() takes a lock and builds its key on every call; the children of one
        # (route, method, status) never change, so each is looked up once.
        key = (route, method, status)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self.requests.labels(route, method, str(status)),
                self.latency.labels(route, method),
            )
        children[0].inc()
        children[1].observe(seconds)
        if status in (401, 403):
            self.auth_failures.labels(str(status)).inc()

    def render(self) -> bytes:
        # The engine's own gauges and its interceptors' metrics (MetricsInterceptor).
        return generate_latest(self.registry) + self._engine.metrics_text().encode()
