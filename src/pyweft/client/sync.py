"""``pyweft.sync.Client``: the blocking twin of :class:`pyweft.client.Client`.

Same methods, same typed errors; each call blocks while the async client does the
work on one background event-loop thread (the one ``pyweft.sync.Engine`` uses too).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Literal

from pyweft import (
    Group,
    History,
    MessageHandlers,
    Page,
    QueueInfo,
    ReviewInfo,
    WorkerInfo,
    WorkflowInfo,
)
from pyweft.client.handle import OMITTED
from pyweft.client.http import Client as AsyncClient
from pyweft.durations import DurationLike
from pyweft.sync import process
from pyweft.sync.events import EventIterator
from pyweft.sync.loop import LoopThread
from pyweft.sync.published import StreamIterator


class SyncWorkflowHandle:
    """A run on a server, with blocking methods."""

    def __init__(self, client: Client, workflow_id: str) -> None:
        self._client = client
        self.id = workflow_id

    def __repr__(self) -> str:
        return f"SyncWorkflowHandle(id={self.id!r})"

    def result(self, timeout: DurationLike | None = None) -> Any:
        return self._client.result(self.id, timeout=timeout)

    def describe(self) -> WorkflowInfo:
        return self._client.describe(self.id)

    def cancel(self) -> None:
        self._client.cancel(self.id)

    def history(self) -> History:
        return self._client.history(self.id)

    def signal(self, name: str, payload: Any = None, *, signal_id: str | None = None) -> None:
        self._client.signal(self.id, name, payload, signal_id=signal_id)

    def query(self, name: str, *args: Any, timeout: DurationLike = 5.0) -> Any:
        return self._client.query(self.id, name, *args, timeout=timeout)

    def update(
        self,
        name: str,
        payload: Any = OMITTED,
        *,
        timeout: DurationLike = 5.0,
        idempotency_key: str | None = None,
    ) -> Any:
        return self._client.update(
            self.id, name, payload, timeout=timeout, idempotency_key=idempotency_key
        )

    def suspend(self) -> None:
        self._client.suspend(self.id)

    def resume(self) -> None:
        self._client.resume(self.id)

    def events(self) -> EventIterator:
        return self._client.events(self.id)


class Client:
    """Blocking HTTP client; takes the same arguments as :class:`pyweft.client.Client`.

    Use it with ``with`` (or call :meth:`close`) so its loop thread stops.
    """

    def __init__(self, url: str | None = None, *, token: str | None = None, **options: Any):
        self._loop = LoopThread("pyweft-sync-client")

        async def make() -> AsyncClient:
            return AsyncClient(url, token=token, **options)

        try:
            self._client = self._loop.run(make)
        except BaseException:
            self._loop.stop()
            raise
        self._loop.owner = self
        process.track(self)  # closed at interpreter exit if the caller forgets

    @property
    def async_client(self) -> AsyncClient:
        return self._client

    def close(self) -> None:
        """Close the connections and stop the loop thread. Idempotent."""
        process.forget(self)
        if self._loop.accepting:
            self._loop.run(self._client.aclose)
            self._loop.stop()

    def _after_fork_in_child(self) -> None:
        self._loop.after_fork_in_child()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self, wf: Any, *args: Any, **options: Any) -> SyncWorkflowHandle:
        handle = self._loop.run(self._client.start, wf, *args, **options)
        return SyncWorkflowHandle(self, handle.id)

    def get_handle(self, workflow_id: str, result_type: object = None) -> SyncWorkflowHandle:
        return SyncWorkflowHandle(self, workflow_id)

    def start_or_signal(
        self, wf: Any, *args: Any, signal: tuple[str, Any], **options: Any
    ) -> tuple[SyncWorkflowHandle, Literal["started", "signalled"]]:
        handle, outcome = self._loop.run(
            self._client.start_or_signal, wf, *args, signal=signal, **options
        )
        return SyncWorkflowHandle(self, handle.id), outcome

    def result(self, workflow_id: str, *, timeout: DurationLike | None = None) -> Any:
        return self._loop.run(self._client.result, workflow_id, timeout=timeout)

    def cancel(self, workflow_id: str) -> None:
        self._loop.run(self._client.cancel, workflow_id)

    def suspend(self, workflow_id: str) -> None:
        self._loop.run(self._client.suspend, workflow_id)

    def resume(self, workflow_id: str) -> None:
        self._loop.run(self._client.resume, workflow_id)

    def fail(self, workflow_id: str, reason: str) -> None:
        self._loop.run(self._client.fail, workflow_id, reason)

    def fork(
        self, workflow_id: str, *, from_step: int | None = None, id: str | None = None
    ) -> SyncWorkflowHandle:
        handle = self._loop.run(self._client.fork, workflow_id, from_step=from_step, id=id)
        return SyncWorkflowHandle(self, handle.id)

    def signal(
        self, workflow_id: str, name: str, payload: Any = None, *, signal_id: str | None = None
    ) -> None:
        self._loop.run(self._client.signal, workflow_id, name, payload, signal_id=signal_id)

    def query(self, workflow_id: str, name: str, *args: Any, timeout: DurationLike = 5.0) -> Any:
        return self._loop.run(self._client.query, workflow_id, name, *args, timeout=timeout)

    def handlers(self, workflow_id: str) -> MessageHandlers:
        return self._loop.run(self._client.handlers, workflow_id)

    def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any = OMITTED,
        *,
        timeout: Any = 5.0,
        idempotency_key: str | None = None,
    ) -> Any:
        return self._loop.run(
            self._client.update,
            workflow_id,
            name,
            payload,
            timeout=timeout,
            idempotency_key=idempotency_key,
        )

    def update_result(self, update_id: str, *, timeout: Any = None) -> Any:
        return self._loop.run(self._client.update_result, update_id, timeout=timeout)

    def submit_review(
        self,
        review_id: str,
        decision: Literal["approved", "rejected", "needs_changes"],
        *,
        reviewer: str,
        feedback: str | None = None,
    ) -> None:
        self._loop.run(
            self._client.submit_review, review_id, decision, reviewer=reviewer, feedback=feedback
        )

    def list_reviews(self, **filters: Any) -> builtins.list[ReviewInfo]:
        return self._loop.run(self._client.list_reviews, **filters)

    def describe(self, workflow_id: str) -> WorkflowInfo:
        return self._loop.run(self._client.describe, workflow_id)

    def queues(self) -> builtins.list[QueueInfo]:
        return self._loop.run(self._client.queues)

    def queue_info(self, name: str) -> QueueInfo:
        return self._loop.run(self._client.queue_info, name)

    def workers(self, *, include_gone: bool = False) -> builtins.list[WorkerInfo]:
        return self._loop.run(self._client.workers, include_gone=include_gone)

    def drain_worker(self, worker_id: str) -> WorkerInfo | None:
        return self._loop.run(self._client.drain_worker, worker_id)

    def resume_worker(self, worker_id: str) -> WorkerInfo | None:
        return self._loop.run(self._client.resume_worker, worker_id)

    def history(self, workflow_id: str) -> History:
        return self._loop.run(self._client.history, workflow_id)

    def list(
        self, *, limit: int = 100, cursor: str | None = None, **filters: Any
    ) -> Page[WorkflowInfo]:
        return self._loop.run(self._client.list, limit=limit, cursor=cursor, **filters)

    def aggregate(self, *, group_by: str, **filters: Any) -> builtins.list[Group]:
        return self._loop.run(self._client.aggregate, group_by=group_by, **filters)

    def set_attributes(self, workflow_id: str, values: Mapping[str, Any]) -> None:
        self._loop.run(self._client.set_attributes, workflow_id, values)

    def purge(self, **filters: Any) -> int:
        return self._loop.run(self._client.purge, **filters)

    def events(self, workflow_id: str | None = None) -> EventIterator:
        """Events over SSE as a blocking iterator (see :meth:`pyweft.client.Client.events`)."""
        return EventIterator(self._loop, lambda: self._client.events(workflow_id))

    # --- published events and streams, update-with-start, debounce (issue 16) ---------

    def get_event(self, workflow_id: str, key: str, *, timeout: DurationLike = 60.0) -> Any:
        return self._loop.run(self._client.get_event, workflow_id, key, timeout=timeout)

    def read_stream(self, workflow_id: str, key: str, *, from_offset: int = 0) -> StreamIterator:
        """A run's stream over SSE as a blocking iterator."""
        return StreamIterator(
            self._loop,
            lambda: self._client.read_stream(workflow_id, key, from_offset=from_offset),
        )

    def update_with_start(
        self, wf: Any, *args: Any, update: tuple[str, Any] | str, id: str, **options: Any
    ) -> tuple[SyncWorkflowHandle, Any]:
        handle, answer = self._loop.run(
            self._client.update_with_start, wf, *args, update=update, id=id, **options
        )
        return SyncWorkflowHandle(self, handle.id), answer

    def debounce(
        self, key: str, wf: Any, *args: Any, period: DurationLike, **options: Any
    ) -> SyncWorkflowHandle:
        handle = self._loop.run(self._client.debounce, key, wf, *args, period=period, **options)
        return SyncWorkflowHandle(self, handle.id)


__all__ = ["Client", "SyncWorkflowHandle"]
