"""A served engine with task streams, and a raw protocol client to poke it with."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from pyweft import Engine, RetryPolicy, WorkflowContext, activity, workflow
from pyweft.engine.tasks import records as tr
from pyweft.server import ServerAuth, create_app
from pyweft.server.keys import ApiKeyStore
from pyweft.server.task_hub import TaskHub, TaskStreamOptions
from pyweft.storage.base import Storage
from support.backends import durable_backend, postgres_schema, with_schema

from .live import serve_app

QUEUE = "remote"
OPTIONS = TaskStreamOptions(
    reconnect_grace_s=1.0, heartbeat_interval_s=0.5, poll_interval_s=0.05, shutdown_timeout_s=5
)


@activity(name="echo", queue=QUEUE, retry=RetryPolicy(max_attempts=3, initial_interval=0.05))
async def echo(value: Any) -> Any:
    return value


@workflow
async def call_echo(ctx: WorkflowContext, value: Any) -> Any:
    return await ctx.run(echo, value)


@dataclass
class Served:
    engine: Engine
    url: str  # http://127.0.0.1:port
    hub: TaskHub
    token: str  # scope workers:write
    reader_token: str  # scope workflows:read only

    def stream(self, queue: str = QUEUE) -> str:
        return self.url.replace("http://", "ws://") + f"/api/v1/tasks/{queue}/stream"

    async def results_stored(self) -> list[str]:
        return [k for k, _ in await self.engine.storage.scan(tr.RESULT_PREFIX)]


@asynccontextmanager
async def served(
    tmp_path: Path, *workflows: Any, storage: Storage | None = None
) -> AsyncIterator[Served]:
    """An engine on ``storage``, else on the durable test store (SQLite in ``tmp_path``,
    or PostgreSQL with ``PYWEFT_TEST_STORAGE=postgres``), served with task streams."""
    with contextlib.ExitStack() as stack:
        if storage is not None:
            store: str | Storage = storage
        elif durable_backend() == "postgres":
            store = with_schema(*stack.enter_context(postgres_schema()))
        else:
            store = f"sqlite:///{tmp_path / 'streams.db'}"
        async with _serve(store, workflows) as srv:
            yield srv


@asynccontextmanager
async def _serve(store: str | Storage, workflows: tuple[Any, ...]) -> AsyncIterator[Served]:
    async with Engine(
        store, workflows=[call_echo, *workflows], serve_queues=[], poll_interval=0.05
    ) as engine:
        keys = ApiKeyStore(engine.storage)
        _, token = await keys.create(subject="worker", scopes=["workers:write"])
        _, reader = await keys.create(subject="reader", scopes=["workflows:read"])
        app = create_app(engine, auth=ServerAuth(), task_streams=OPTIONS)
        async with serve_app(app) as base:
            yield Served(
                engine=engine,
                url=base,
                hub=app.state.pyweft_tasks,
                token=token,
                reader_token=reader,
            )


class Raw:
    """A worker speaking the protocol by hand, frame by frame."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    async def send(self, **frame: Any) -> None:
        await self.ws.send(json.dumps(frame))

    async def reply(self, task: dict[str, Any], status: str, **fields: Any) -> None:
        """Send the ``taskResult`` of ``task`` (its operation id and attempt token)."""
        await self.send(
            type="taskResult",
            operationId=task["operationId"],
            attemptToken=task["attemptToken"],
            status=status,
            **fields,
        )

    async def recv(self, timeout: float = 5.0) -> dict[str, Any]:
        text = await asyncio.wait_for(self.ws.recv(), timeout)
        frame: dict[str, Any] = json.loads(text)
        return frame

    async def expect(self, kind: str, timeout: float = 5.0) -> dict[str, Any]:
        """The next frame of type ``kind`` (heartbeat-free servers send nothing else
        unasked, but tasks may arrive in between: they are kept in ``self.tasks``)."""
        while True:
            frame = await self.recv(timeout)
            if frame["type"] == kind:
                return frame
            if frame["type"] != "task":
                raise AssertionError(f"expected {kind}, got {frame}")
            self.pending.append(frame)

    pending: list[dict[str, Any]]

    async def register(
        self, activities: list[str], *, beat: bool = True, **extra: Any
    ) -> dict[str, Any]:
        """Register; with ``beat``, heartbeat every 0.1s from then on."""
        self.pending = []
        await self.send(type="register", protocolVersion=1, activities=activities, **extra)
        ack = await self.expect("registerAck")
        if beat:
            self.beater = asyncio.get_running_loop().create_task(self._beat())
        return ack

    beater: asyncio.Task[None] | None = None

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            try:
                await self.send(type="heartbeat")
            except Exception:
                return

    async def task(self, timeout: float = 5.0) -> dict[str, Any]:
        if self.pending:
            return self.pending.pop(0)
        return await self.expect("task", timeout)

    async def closed(self, timeout: float = 5.0) -> int | None:
        """Wait for the server to close; the close code."""
        try:
            while True:
                await asyncio.wait_for(self.ws.recv(), timeout)
        except Exception:
            pass
        return self.ws.close_code


@asynccontextmanager
async def raw(stream_url: str, token: str | None) -> AsyncIterator[Raw]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with connect(stream_url, additional_headers=headers) as ws:
        client = Raw(ws)
        client.pending = []
        try:
            yield client
        finally:
            if client.beater is not None:
                client.beater.cancel()
