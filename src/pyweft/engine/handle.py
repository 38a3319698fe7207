"""``WorkflowHandle``: a reference to one run, returned by ``start`` and ``get_handle``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pyweft.durations import parse_optional_duration
from pyweft.engine.messages.updates import OMITTED
from pyweft.engine.replay.events import WorkflowEvent
from pyweft.engine.replay.info import WorkflowInfo
from pyweft.engine.visibility.reader import History
from pyweft.errors import InvalidArgumentError

if TYPE_CHECKING:
    from pyweft.definitions import Duration
    from pyweft.engine.engine import Engine

R_co = TypeVar("R_co", covariant=True)


def check_result_type(result_type: object, call: str) -> None:
    """Refuse a ``result_type`` that is not a type (``get_handle(id, "order-1")``).

    The type is for type checkers only, so anything a checker accepts as one
    passes: classes, ``list[int]``, ``int | None``, ``Any``, a ``NewType``.
    """
    if result_type is None or isinstance(result_type, type):
        return
    if type(result_type).__module__ in ("typing", "types", "typing_extensions"):
        return
    raise InvalidArgumentError(
        f"{call}: result_type must be a type such as Receipt or dict[str, int] (it types "
        f"what result() returns), got {result_type!r}; pass the workflow id first, as in "
        f"{call}(workflow_id, Receipt)"
    )


class WorkflowHandle(Generic[R_co]):
    """Cheap to create; every method goes through the engine that made it.

    ``R_co`` is the workflow's return type, as type checkers see it:
    ``engine.start(checkout, order)`` gives a ``WorkflowHandle[Receipt]`` when
    ``checkout`` returns ``Receipt``, and ``await handle.result()`` is a
    ``Receipt``. A handle made from a workflow name is a ``WorkflowHandle[Any]``.
    """

    __slots__ = ("_engine", "id")

    def __init__(self, engine: Engine, workflow_id: str) -> None:
        self._engine = engine
        self.id = workflow_id

    def __repr__(self) -> str:
        return f"WorkflowHandle(id={self.id!r})"

    async def result(self, timeout: Duration | None = None) -> R_co:
        """Wait for the run to finish and return its result (or raise its failure).

        ``timeout`` (seconds, ``timedelta`` or a string like ``"30s"``) bounds
        the wait only; the run keeps going when it passes.
        """
        seconds = parse_optional_duration(timeout, field="timeout")
        value: R_co = await self._engine.result(self.id, timeout=seconds)
        return value

    async def describe(self) -> WorkflowInfo:
        return await self._engine.describe(self.id)

    async def cancel(self) -> None:
        await self._engine.cancel(self.id)

    async def history(self) -> History:
        return await self._engine.history(self.id)

    async def signal(self, name: str, payload: Any = None, *, signal_id: str | None = None) -> None:
        await self._engine.signal(self.id, name, payload, signal_id=signal_id)

    async def query(self, name: str, *args: Any, timeout: Duration = 5.0) -> Any:
        return await self._engine.query(self.id, name, *args, timeout=timeout)

    async def update(
        self,
        name: str,
        payload: Any = OMITTED,
        *,
        timeout: Duration = 5.0,
        idempotency_key: str | None = None,
    ) -> Any:
        return await self._engine.update(
            self.id, name, payload, timeout=timeout, idempotency_key=idempotency_key
        )

    async def suspend(self) -> None:
        await self._engine.suspend(self.id)

    async def resume(self) -> None:
        await self._engine.resume(self.id)

    def events(self) -> AsyncIterator[WorkflowEvent]:
        """This run's lifecycle events from now until its terminal event (in-process).

        A run that has already finished, or finishes in another process, yields only
        its terminal event, read from the store, and the stream ends."""
        return self._engine.run_events(self.id)
