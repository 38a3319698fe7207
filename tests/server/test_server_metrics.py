"""The server's /metrics includes the engine's metrics_text(): its gauges and what a
MetricsInterceptor counts, next to the server's own request metrics."""

from __future__ import annotations

import httpx

from pyweft import Engine, MemoryStorage
from pyweft.observability.metrics import MetricsInterceptor
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
