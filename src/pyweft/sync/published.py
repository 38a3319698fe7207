"""The blocking twins of published events, streams, update-with-start and debounce,
mixed into :class:`pyweft.sync.Engine` (the async ones live in ``messaging_api.py``)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from pyweft.definitions import Duration
from pyweft.engine.handle import WorkflowHandle as AsyncHandle
from pyweft.sync.events import EventIterator
from pyweft.sync.handle import WorkflowHandle
from pyweft.sync.loop import LoopThread

if TYPE_CHECKING:
    from pyweft.engine.engine import Engine as AsyncEngine
    from pyweft.sync.engine import Engine

P = ParamSpec("P")
T = TypeVar("T")


class StreamIterator:
    """A run's stream as a blocking iterator: ``for chunk in engine.read_stream(...)``.

    Ends as the async one does (stream closed, or run finished, and every chunk
    read); :meth:`close` (or leaving a ``with`` block) stops following it early.
    """

    def __init__(self, loop: LoopThread, source: Callable[[], AsyncIterator[Any]]) -> None:
        # Chunks travel as 1-tuples: the event iterator ends on None, a chunk may be None.
        self._events = EventIterator(loop, cast(Any, functools.partial(_boxed, source)))

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        boxed = cast("tuple[Any]", next(self._events))
        return boxed[0]

    def close(self) -> None:
        self._events.close()

    def __enter__(self) -> StreamIterator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _boxed(source: Callable[[], AsyncIterator[Any]]) -> AsyncIterator[tuple[Any]]:
    stream = source()  # checks its arguments now, on the loop

    async def boxes() -> AsyncIterator[tuple[Any]]:
        async for chunk in stream:
            yield (chunk,)

    return boxes()


class PublishedMixin:
    """Events, streams, update-with-start and debounce for the blocking engine."""

    _engine: AsyncEngine
    _loop: LoopThread

    def _run(
        self, fn: Callable[P, Coroutine[Any, Any, T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        raise NotImplementedError  # provided by Engine

    def _self(self) -> Engine:
        return self  # type: ignore[return-value]  # only ever mixed into the sync Engine

    def get_event(self, workflow_id: str, key: str, *, timeout: Duration = 60.0) -> Any:
        """The run's published event ``key``, waiting up to ``timeout`` (see ``Engine``)."""
        return self._run(self._engine.get_event, workflow_id, key, timeout=timeout)

    def read_stream(self, workflow_id: str, key: str, *, from_offset: int = 0) -> StreamIterator:
        """Follow the run's stream ``key`` live, as a blocking iterator (see ``Engine``)."""
        self._loop.refuse_loop_thread("read_stream")
        read = functools.partial(
            self._engine.read_stream, workflow_id, key, from_offset=from_offset
        )
        return StreamIterator(self._loop, read)

    def update_with_start(
        self,
        wf: Callable[..., Any] | str,
        *args: Any,
        update: tuple[str, Any] | str,
        id: str,
        timeout: Duration = 5.0,
        idempotency_key: str | None = None,
        execution_timeout: Duration | None = None,
        tags: Sequence[str] = (),
    ) -> tuple[WorkflowHandle[Any], Any]:
        """Start run ``id`` if absent and deliver an update; ``(handle, answer)``."""
        handle, answer = self._run(
            self._engine.update_with_start,
            wf,
            *args,
            update=update,
            id=id,
            timeout=timeout,
            idempotency_key=idempotency_key,
            execution_timeout=execution_timeout,
            tags=tags,
        )
        return WorkflowHandle(self._self(), handle.id), answer

    def debounce(
        self,
        key: str,
        wf: Callable[..., Any] | str,
        *args: Any,
        period: Duration,
        max_wait: Duration | None = None,
    ) -> WorkflowHandle[Any]:
        """Collapse calls with one ``key`` within ``period`` into one run (see ``Engine``)."""
        handle: AsyncHandle[Any] = self._run(
            self._engine.debounce, key, wf, *args, period=period, max_wait=max_wait
        )
        return WorkflowHandle(self._self(), handle.id)
