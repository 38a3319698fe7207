"""``WorkflowClient``: what ``Engine`` and the HTTP ``Client`` both offer, so application
code can take either (in-process or remote, chosen by configuration)."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pyweft import Group, History, MessageHandlers, Page, WorkflowEvent, WorkflowInfo
from pyweft.durations import DurationLike


class WorkflowHandleLike(Protocol):
    """A reference to one run: ``pyweft.WorkflowHandle`` or the client's handle."""

    @property
    def id(self) -> str: ...
    async def result(self, timeout: DurationLike | None = None) -> Any: ...
    async def describe(self) -> WorkflowInfo: ...
    async def cancel(self) -> None: ...
    async def history(self) -> History: ...
    async def signal(
        self, name: str, payload: Any = None, *, signal_id: str | None = None
    ) -> None: ...
    async def query(self, name: str, *args: Any, timeout: DurationLike = 5.0) -> Any: ...
    async def update(
        self,
        name: str,
        payload: Any = ...,
        *,
        timeout: DurationLike = 5.0,
        idempotency_key: str | None = None,
    ) -> Any: ...
    async def suspend(self) -> None: ...
    async def resume(self) -> None: ...
    def events(self) -> AsyncIterator[WorkflowEvent]: ...


class WorkflowClient(Protocol):
    """The calls an application makes on runs, wherever the engine is."""

    async def start(
        self,
        wf: Any,
        *args: Any,
        id: str | None = None,
        idempotency_key: str | None = None,
        on_conflict: Literal["fail", "use_existing"] = "fail",
        execution_timeout: DurationLike | None = None,
        start_delay: DurationLike | None = None,
        start_at: datetime | float | None = None,
        tags: Sequence[str] = (),
        attributes: Mapping[str, Any] | None = None,
    ) -> WorkflowHandleLike: ...
    def get_handle(self, workflow_id: str) -> WorkflowHandleLike: ...
    async def signal(
        self, workflow_id: str, name: str, payload: Any = None, *, signal_id: str | None = None
    ) -> None: ...
    async def query(
        self, workflow_id: str, name: str, *args: Any, timeout: DurationLike = 5.0
    ) -> Any: ...
    async def handlers(self, workflow_id: str) -> MessageHandlers: ...
    async def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any = ...,
        *,
        timeout: Any = 5.0,
        idempotency_key: str | None = None,
    ) -> Any: ...
    async def result(self, workflow_id: str, *, timeout: DurationLike | None = None) -> Any: ...
    async def cancel(self, workflow_id: str) -> None: ...
    async def suspend(self, workflow_id: str) -> None: ...
    async def resume(self, workflow_id: str) -> None: ...
    async def describe(self, workflow_id: str) -> WorkflowInfo: ...
    async def history(self, workflow_id: str) -> History: ...
    async def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        workflow_type: str | None = None,
        id_prefix: str | None = None,
        parent_id: str | None = None,
        created_after: datetime | float | None = None,
        created_before: datetime | float | None = None,
        updated_after: datetime | float | None = None,
        updated_before: datetime | float | None = None,
        attributes: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[WorkflowInfo]: ...
    async def aggregate(self, *, group_by: str, **filters: Any) -> builtins.list[Group]: ...
    async def set_attributes(self, workflow_id: str, values: Mapping[str, Any]) -> None: ...
    def events(self, workflow_id: str | None = None) -> AsyncIterator[WorkflowEvent]: ...
    # Published events and streams, update-with-start, debounce (issue 16).
    async def get_event(
        self, workflow_id: str, key: str, *, timeout: DurationLike = 60.0
    ) -> Any: ...
    def read_stream(
        self, workflow_id: str, key: str, *, from_offset: int = 0
    ) -> AsyncIterator[Any]: ...
    async def update_with_start(
        self,
        wf: Any,
        *args: Any,
        update: tuple[str, Any] | str,
        id: str,
        timeout: DurationLike = 5.0,
        idempotency_key: str | None = None,
        execution_timeout: DurationLike | None = None,
        tags: Sequence[str] = (),
    ) -> tuple[WorkflowHandleLike, Any]: ...
    async def debounce(
        self,
        key: str,
        wf: Any,
        *args: Any,
        period: DurationLike,
        max_wait: DurationLike | None = None,
    ) -> WorkflowHandleLike: ...


if TYPE_CHECKING:  # mypy --strict proves both implementations fit the protocol
    from pyweft import Engine
    from pyweft.client.http import Client

    def _both_fit(engine: Engine, client: Client) -> tuple[WorkflowClient, WorkflowClient]:
        return engine, client
