"""``WorkflowHandle`` for the sync facade: the async handle's methods, blocking."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pyweft.engine.messages.updates import OMITTED
from pyweft.engine.replay.info import WorkflowInfo
from pyweft.engine.visibility.reader import History
from pyweft.sync.events import EventIterator

if TYPE_CHECKING:
    from pyweft.definitions import Duration
    from pyweft.sync.engine import Engine

R_co = TypeVar("R_co", covariant=True)


class WorkflowHandle(Generic[R_co]):
    """A reference to one run; cheap to create, every method goes through its engine.

    ``R_co`` is the workflow's return type for type checkers, as on
    :class:`pyweft.WorkflowHandle`: ``handle.result()`` returns it.
    """

    __slots__ = ("_engine", "id")

    def __init__(self, engine: Engine, workflow_id: str) -> None:
        self._engine = engine
        self.id = workflow_id

    def __repr__(self) -> str:
        return f"pyweft.sync.WorkflowHandle(id={self.id!r})"

    def result(self, timeout: Duration | None = None) -> R_co:
        """Block until the run finishes and return its result (or raise its failure).

        ``timeout`` bounds the wait only and raises ``ResultTimeoutError``; the
        run keeps going.
        """
        value: R_co = self._engine.result(self.id, timeout=timeout)
        return value

    def describe(self) -> WorkflowInfo:
        return self._engine.describe(self.id)

    def cancel(self) -> None:
        self._engine.cancel(self.id)

    def history(self) -> History:
        return self._engine.history(self.id)

    def signal(self, name: str, payload: Any = None, *, signal_id: str | None = None) -> None:
        self._engine.signal(self.id, name, payload, signal_id=signal_id)

    def query(self, name: str, *args: Any, timeout: Duration = 5.0) -> Any:
        return self._engine.query(self.id, name, *args, timeout=timeout)

    def update(
        self,
        name: str,
        payload: Any = OMITTED,
        *,
        timeout: Duration = 5.0,
        idempotency_key: str | None = None,
    ) -> Any:
        return self._engine.update(
            self.id, name, payload, timeout=timeout, idempotency_key=idempotency_key
        )

    def suspend(self) -> None:
        self._engine.suspend(self.id)

    def resume(self) -> None:
        self._engine.resume(self.id)

    def events(self) -> EventIterator:
        """This run's lifecycle events from now until its terminal event (in-process)."""
        return self._engine.run_events(self.id)
