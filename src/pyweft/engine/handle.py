"""``WorkflowHandle``: a reference to one run, returned by ``start`` and ``get_handle``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyweft.durations import parse_optional_duration
from pyweft.engine.info import StepInfo, WorkflowInfo

if TYPE_CHECKING:
    from pyweft.definitions import Duration
    from pyweft.engine.engine import Engine


class WorkflowHandle:
    """Cheap to create; every method goes through the engine that made it."""

    __slots__ = ("_engine", "id")

    def __init__(self, engine: Engine, workflow_id: str) -> None:
        self._engine = engine
        self.id = workflow_id

    def __repr__(self) -> str:
        return f"WorkflowHandle(id={self.id!r})"

    async def result(self, timeout: Duration | None = None) -> Any:
        """Wait for the run to finish and return its result (or raise its failure).

        ``timeout`` (seconds, ``timedelta`` or a string like ``"30s"``) bounds
        the wait only; the run keeps going when it passes.
        """
        seconds = parse_optional_duration(timeout, field="timeout")
        return await self._engine.result(self.id, timeout=seconds)

    async def describe(self) -> WorkflowInfo:
        return await self._engine.describe(self.id)

    async def cancel(self) -> None:
        await self._engine.cancel(self.id)

    async def history(self) -> list[StepInfo]:
        return await self._engine.history(self.id)
