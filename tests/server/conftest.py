from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from pyweft import Engine, MemoryStorage, WorkflowContext, activity, workflow
from pyweft.server import ServerAuth, create_app


@activity
async def add_one(x: int) -> int:
    return x + 1


@workflow
async def add_three(ctx: WorkflowContext, x: int) -> int:
    for _ in range(3):
        try:
            x = await ctx.run(add_one, x)
        except Exception:
            raise
    return x


@workflow
async def waits_for_go(ctx: WorkflowContext) -> Any:
    state = {"seen": 0}
    ctx.on_query("seen", lambda: state["seen"])

    def bump(n: int) -> int:
        state["seen"] += n
        return state["seen"]

    ctx.on_update("bump", bump)
    go = await ctx.wait_for_signal("go")
    return {"go": go}


@workflow
async def collects_two(ctx: WorkflowContext) -> list[Any]:
    first = await ctx.wait_for_signal("item")
    second = await ctx.wait_for_signal("item")
    return [first, second]


@workflow
async def fails(ctx: WorkflowContext) -> None:
    raise ValueError("no luck")


WORKFLOWS = [add_three, waits_for_go, collects_two, fails]


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    async with Engine(MemoryStorage(), workflows=WORKFLOWS) as eng:
        yield eng


AppFactory = Callable[..., Any]


@pytest.fixture
async def make_client(engine: Engine) -> AsyncIterator[Callable[..., Any]]:
    """Build the ASGI app with options and an httpx client over it, lifespan included."""
    stack: list[Any] = []

    async def build(**options: Any) -> httpx.AsyncClient:
        app = create_app(engine, **options)
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://testserver"
        )
        stack.append((lifespan, client))
        return client

    yield build
    for lifespan, client in reversed(stack):
        await client.aclose()
        await lifespan.__aexit__(None, None, None)


@pytest.fixture
async def http(make_client: Callable[..., Any]) -> httpx.AsyncClient:
    client: httpx.AsyncClient = await make_client()
    return client


@pytest.fixture
async def authed(make_client: Callable[..., Any]) -> httpx.AsyncClient:
    client: httpx.AsyncClient = await make_client(auth=ServerAuth())
    return client
