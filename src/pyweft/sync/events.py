"""``EventIterator``: a blocking iterator over the engine's in-process lifecycle events."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any

from pyweft.engine.replay.events import WorkflowEvent
from pyweft.errors import EngineClosedError
from pyweft.sync.loop import LoopThread


class EventIterator:
    """Events as they happen, from the moment ``events()`` returned; ``next()`` blocks.

    It ends when the engine closes, after the run's terminal event (for
    ``handle.events()``), or when :meth:`close` is called, from any thread,
    which also ends a ``next()`` blocked in another thread. Use it as a
    context manager to unsubscribe when leaving a loop early. Iterate it from
    one thread at a time. Ctrl-C during ``next()`` ends the iterator too.
    """

    def __init__(
        self,
        loop: LoopThread,
        subscribe: Callable[[], AsyncIterator[WorkflowEvent]] | None,
    ) -> None:
        """Subscribe now (``subscribe`` runs on the loop); ``None`` makes an ended iterator."""
        self._loop = loop
        self._lock = threading.Lock()
        self._step: concurrent.futures.Future[WorkflowEvent | None] | None = None
        self._task: asyncio.Task[Any] | None = None  # the step in flight, on the loop
        self._source: AsyncIterator[WorkflowEvent] | None = None
        self._ended = True
        if subscribe is None or not loop.accepting:
            return
        loop.refuse_loop_thread("events")
        try:
            self._source = loop.call(subscribe)  # the engine's stream subscribes when made
        except EngineClosedError:
            return  # closed meanwhile: an ended iterator, as the async one would be
        self._ended = False

    def __iter__(self) -> EventIterator:
        return self

    def __next__(self) -> WorkflowEvent:
        self._loop.refuse_loop_thread("events")
        with self._lock:
            if self._ended or self._source is None:
                raise StopIteration
            step = self._step
            if step is None:
                try:
                    step = self._step = self._loop.submit(self._pull(self._source))
                except EngineClosedError:
                    self._ended = True
                    raise StopIteration from None
        try:
            event = self._loop.wait(step)
        except (concurrent.futures.CancelledError, EngineClosedError):
            event = None  # close() from another thread, or the engine stopped
        except BaseException:
            self.close()  # Ctrl-C: the step was cancelled, so the subscription is gone
            raise
        with self._lock:
            self._step = None
            if event is None:
                self._ended = True
        if event is None:
            self.close()
            raise StopIteration
        return event

    def close(self) -> None:
        """Unsubscribe and end the iterator. Idempotent; safe from any thread."""
        with self._lock:
            self._ended = True
            step, self._step = self._step, None
            source, self._source = self._source, None
        if step is not None:
            step.cancel()  # wakes a next() blocked in another thread
        if source is None:
            return
        try:
            future = self._loop.submit(self._unsubscribe(source))
        except EngineClosedError:
            return  # the loop is gone, and asyncio closed the generator on its way out
        if not self._loop.in_loop_thread():
            self._loop.wait(future, cancel_on_interrupt=False)

    def __enter__(self) -> EventIterator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- on the loop ----------------------------------------------------------------

    async def _pull(self, source: AsyncIterator[WorkflowEvent]) -> WorkflowEvent | None:
        self._task = asyncio.current_task()
        try:
            return await anext(source)
        except StopAsyncIteration:
            return None

    async def _unsubscribe(self, source: AsyncIterator[WorkflowEvent]) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()  # a step in flight holds the generator; stop it first
            await asyncio.wait({task})
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()
