"""A real uvicorn server for an engine, on a free port, inside the test's event loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from starlette.applications import Starlette

from pyweft import Engine
from pyweft.server import create_app


@asynccontextmanager
async def live_server(engine: Engine, **options: Any) -> AsyncIterator[str]:
    """Serve ``engine`` on 127.0.0.1; yields the base URL. Stops the server on exit."""
    async with serve_app(create_app(engine, **options)) as url:
        yield url


@asynccontextmanager
async def serve_app(app: Starlette) -> AsyncIterator[str]:
    """Serve an app built by ``create_app`` on 127.0.0.1; yields the base URL."""
    # asyncio turns Nagle off (TCP_NODELAY) only on sockets whose proto is TCP: with
    # socket.socket() a frame written right after another waits ~40 ms for an ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="on", log_level="warning", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()
