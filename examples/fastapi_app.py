"""An order service on FastAPI: the engine lives in the app's lifespan, routes start
workflows, await their results and stream their progress as server-sent events.

Run it with ``uvicorn examples.fastapi_app:app`` (one worker process on SQLite).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from pyweft import (
    Engine,
    PyweftError,
    ResultTimeoutError,
    WorkflowContext,
    WorkflowHandle,
    WorkflowNotFoundError,
    WorkflowTerminalError,
    activity,
    workflow,
)

APPROVAL_LIMIT_CENTS = 100_00  # orders from this amount wait for a person's approval


class Order(BaseModel):
    id: str
    cents: int


class Shipment(BaseModel):
    order_id: str
    receipt: str
    tracking: str
    approved_by: str | None = None


@activity
async def charge(order_id: str, cents: int) -> str:
    return f"rcpt-{order_id}-{cents}"  # a payment provider's call goes here


@activity
def ship(order_id: str) -> str:  # a plain `def` runs in the engine's thread pool
    return f"trk-{order_id}"


@workflow
async def fulfil_order(ctx: WorkflowContext, order: Order) -> Shipment:
    receipt = await ctx.run(charge, order.id, order.cents)
    approved_by = None
    if order.cents >= APPROVAL_LIMIT_CENTS:
        approved_by = await ctx.wait_for_signal("approve", timeout="2d")
    tracking = await ctx.run(ship, order.id)
    return Shipment(order_id=order.id, receipt=receipt, tracking=tracking, approved_by=approved_by)


def create_app(database_url: str | None = None) -> FastAPI:
    url = database_url or os.environ.get("SHOP_DATABASE_URL", "sqlite:///shop.db")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Entering the engine recovers runs an earlier process left unfinished.
        async with Engine(url, workflows=[fulfil_order]) as engine:
            app.state.engine = engine
            yield

    app = FastAPI(title="orders", lifespan=lifespan)
    return _add_routes(app)


def get_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


EngineDep = Annotated[Engine, Depends(get_engine)]
WaitSeconds = Annotated[float, Query(ge=0, le=30)]


def order_handle(engine: Engine, order_id: str) -> WorkflowHandle[Shipment]:
    return engine.get_handle(f"order-{order_id}", Shipment)


def _add_routes(app: FastAPI) -> FastAPI:
    @app.post("/orders", status_code=202)
    async def place_order(order: Order, engine: EngineDep) -> dict[str, str]:
        # The order id is the run id: a retried POST finds the run it already started.
        handle = await engine.start(
            fulfil_order, order, id=f"order-{order.id}", on_conflict="use_existing"
        )
        return {"workflow_id": handle.id, "events": f"/orders/{order.id}/events"}

    @app.get("/orders/{order_id}", response_model=None)
    async def get_order(order_id: str, engine: EngineDep, wait: WaitSeconds = 0.0) -> Any:
        """The shipment once the order is done, waiting up to ``wait`` seconds for it."""
        handle = order_handle(engine, order_id)
        try:
            return await handle.result(timeout=wait)
        except ResultTimeoutError:
            info = await handle.describe()
            return JSONResponse({"status": info.status}, status_code=202)
        except WorkflowNotFoundError:
            raise HTTPException(404, f"no order {order_id!r}") from None
        except PyweftError as exc:  # failed, cancelled or timed out
            raise HTTPException(409, f"order {order_id!r} did not complete: {exc}") from None

    @app.post("/orders/{order_id}/approve", status_code=204)
    async def approve(order_id: str, approver: str, engine: EngineDep) -> None:
        try:
            await order_handle(engine, order_id).signal("approve", approver)
        except WorkflowNotFoundError:
            raise HTTPException(404, f"no order {order_id!r}") from None
        except WorkflowTerminalError:
            raise HTTPException(409, f"order {order_id!r} is already finished") from None

    @app.get("/orders/{order_id}/events")
    async def order_events(order_id: str, engine: EngineDep) -> StreamingResponse:
        handle = order_handle(engine, order_id)
        try:
            await handle.describe()
        except WorkflowNotFoundError:
            raise HTTPException(404, f"no order {order_id!r}") from None
        return StreamingResponse(progress(handle), media_type="text/event-stream")

    return app


def sse(event: str, data: object) -> str:
    return f"event: {event}\ndata: {json.dumps(jsonable_encoder(data))}\n\n"


async def progress(handle: WorkflowHandle[Shipment]) -> AsyncIterator[str]:
    """The run's steps so far, then each new one as it lands, then the outcome.

    The stored history is what is sent; live events only say when to read it
    again. So a client that connects late (or reconnects) misses nothing, and a
    run driven by another process still shows up, at the re-read interval.
    """
    live = handle.events()  # subscribed before the first read: nothing falls in between
    sent: set[tuple[int, str]] = set()
    while True:
        for step in await handle.history():
            if (step.step, step.status) not in sent:
                sent.add((step.step, step.status))
                fields = {"step": step.step, "kind": step.kind, "name": step.name}
                yield sse("waiting" if step.status == "open" else "step", fields)
        info = await handle.describe()
        if info.is_terminal:
            try:
                yield sse("completed", await handle.result())
            except PyweftError as exc:
                yield sse(info.status, {"error": str(exc)})
            return
        try:
            async with asyncio.timeout(5.0):
                await anext(live)  # the next event of this run, or an end after its last
        except (TimeoutError, StopAsyncIteration):
            pass


app = create_app()
