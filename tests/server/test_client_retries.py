"""Which client calls are retried after a connection failure, and which are not."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pyweft import Engine, ServerError
from pyweft.client import Client
from pyweft.server import create_app


class FlakyTransport(httpx.AsyncBaseTransport):
    """The real app behind a network that fails the next ``failures`` requests.

    ``after_send`` makes the failure happen after the server handled the request (the
    answer is lost), as a dropped connection would."""

    def __init__(self, app: Any) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.failures = 0
        self.after_send = False
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.failures:
            self.failures -= 1
            if self.after_send:
                self.sent += 1
                await self.inner.handle_async_request(request)
                raise httpx.ReadError("connection reset", request=request)
            raise httpx.ConnectError("connection refused", request=request)
        self.sent += 1
        return await self.inner.handle_async_request(request)


@pytest.fixture
async def flaky(engine: Engine) -> Any:
    app = create_app(engine)
    async with app.router.lifespan_context(app):
        transport = FlakyTransport(app)
        async with Client("http://test", transport=transport, backoff_s=0.001) as client:
            yield client, transport


async def test_reads_are_retried(flaky: Any) -> None:
    client, transport = flaky
    transport.failures = 2
    assert (await client.list()).items == []


async def test_a_signal_without_signal_id_is_not_retried(flaky: Any, engine: Engine) -> None:
    client, transport = flaky
    await engine.start("waits_for_go", id="w")
    transport.failures, transport.after_send = 1, True
    with pytest.raises(ServerError):
        await client.signal("w", "go", 1)
    assert transport.sent == 1  # one attempt only


async def test_a_signal_with_signal_id_is_retried_and_delivered_once(
    flaky: Any, engine: Engine
) -> None:
    client, transport = flaky
    handle = await engine.start("collects_two", id="w")
    transport.failures, transport.after_send = 1, True
    await client.signal("w", "item", "a", signal_id="s1")  # answer lost, then retried
    assert transport.sent == 2
    await client.signal("w", "item", "b", signal_id="s2")
    assert await handle.result(timeout=10) == ["a", "b"]  # "a" arrived once


async def test_start_with_an_id_is_retried_only_when_nothing_was_sent(
    flaky: Any, engine: Engine
) -> None:
    client, transport = flaky
    transport.failures = 1
    assert (await client.start("waits_for_go", id="a")).id == "a"
    transport.failures, transport.after_send = 1, True
    with pytest.raises(ServerError):
        await client.start("waits_for_go", id="b")
    assert (await engine.describe("b")).status == "running"  # the lost answer's run exists
    transport.failures, transport.after_send = 1, True
    assert (await client.start("waits_for_go", idempotency_key="k")).id
    assert len((await engine.list()).items) == 3


async def test_a_non_json_answer_is_a_server_error() -> None:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def page(request: object) -> PlainTextResponse:
        return PlainTextResponse("<html>bad gateway</html>", status_code=502)

    async def text(request: object) -> PlainTextResponse:
        return PlainTextResponse("hello")

    proxy = Starlette(routes=[Route("/api/v1/workflows", page), Route("/api/v1/reviews", text)])
    transport = httpx.ASGITransport(app=proxy)
    async with Client("http://test", transport=transport) as client:
        with pytest.raises(ServerError) as caught:
            await client.list()
        assert caught.value.status == 502
        with pytest.raises(ServerError, match="not JSON"):
            await client.list_reviews()
