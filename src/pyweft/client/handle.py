"""``RemoteWorkflowHandle``: the client's reference to one run, with the engine handle's
methods."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from pyweft import History, WorkflowEvent, WorkflowInfo
from pyweft.durations import DurationLike

if TYPE_CHECKING:
    from pyweft.client.http import Client

OMITTED: Any = object()
"""Sentinel: no update payload, so the handler gets no argument."""


class RemoteWorkflowHandle:
    """A run on a server. Does no I/O until used; errors surface as typed PyweftErrors."""

    def __init__(self, client: Client, workflow_id: str) -> None:
        self._client = client
        self.id = workflow_id

    def __repr__(self) -> str:
        return f"RemoteWorkflowHandle(id={self.id!r})"

    async def result(self, timeout: DurationLike | None = None) -> Any:
        return await self._client.result(self.id, timeout=timeout)

    async def describe(self) -> WorkflowInfo:
        return await self._client.describe(self.id)

    async def cancel(self) -> None:
        await self._client.cancel(self.id)

    async def history(self) -> History:
        return await self._client.history(self.id)

    async def signal(self, name: str, payload: Any = None, *, signal_id: str | None = None) -> None:
        await self._client.signal(self.id, name, payload, signal_id=signal_id)

    async def query(self, name: str, *args: Any, timeout: DurationLike = 5.0) -> Any:
        return await self._client.query(self.id, name, *args, timeout=timeout)

    async def update(
        self,
        name: str,
        payload: Any = OMITTED,
        *,
        timeout: DurationLike = 5.0,
        idempotency_key: str | None = None,
    ) -> Any:
        return await self._client.update(
            self.id, name, payload, timeout=timeout, idempotency_key=idempotency_key
        )

    async def suspend(self) -> None:
        await self._client.suspend(self.id)

    async def resume(self) -> None:
        await self._client.resume(self.id)

    def events(self) -> AsyncIterator[WorkflowEvent]:
        """This run's events (those the server still holds, then live) until it ends."""
        return self._client.events(self.id)
