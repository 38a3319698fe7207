"""How a run stops being driven by this engine: stop, teardown, engine failures.

A run is torn down when the engine stops driving it for a reason of its own (shutdown,
suspend, a storage failure, lost ownership, code that no longer replays its journal):
from then on every ctx call raises :class:`~pyweft.errors.RunTornDown` and nothing more
is recorded, so the run resumes later from its journal. :class:`Teardown` is mixed into
:class:`~pyweft.engine.replay.run.Run`; ``ENGINE_FAILURES`` says which exceptions are the
engine's own failures rather than outcomes the workflow may react to.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from pyweft.engine.replay.flow import Superseded
from pyweft.errors import EngineDeposedError, LeaseNotHeldError, RunTornDown, StorageError

if TYPE_CHECKING:
    from pyweft.engine.replay.handler_runs import Invocations
    from pyweft.engine.replay.run import Run

# Failures of the engine itself, never outcomes the workflow may react to: a run that
# meets one while driving is torn down (see Run.tear_down) and stays resumable.
ENGINE_FAILURES: tuple[type[BaseException], ...] = (
    StorageError,
    EngineDeposedError,
    LeaseNotHeldError,
    Superseded,
)
# Of those, the ones after which this engine may drive the run again by itself: once its
# store works again, or (superseded) after re-reading what another writer did, e.g. a
# cancel from another process that landed just before this run's final commit. A lost
# lease or claim means another engine drives the run now.
TRANSIENT_FAILURES: tuple[type[BaseException], ...] = (StorageError, Superseded)


class Teardown:
    """The teardown half of a run (mixed into ``Run``)."""

    id: str
    handlers: Invocations
    task: asyncio.Task[None] | None
    stopping: bool
    _stop_reason: str
    torn_down: RunTornDown | None
    teardown_cause: BaseException | None
    _live_ops: int

    def stop(self, reason: str = "the engine is shutting down") -> None:
        """Stop driving this run (shutdown): interrupt a live wait now; a run busy
        committing a result it already has finishes that commit, then is torn down at
        its next ctx call."""
        self.stopping = True
        self._stop_reason = reason
        if self._live_ops > 0:
            self.tear_down(reason)

    def tear_down(self, reason: str, cause: BaseException | None = None) -> RunTornDown:
        """Stop driving this run here, for a reason of the engine's own.

        From now on every ctx call raises :class:`RunTornDown` (which ``except
        Exception`` cannot catch) and nothing more is recorded for the run by this
        engine; its journal stays as it is, so the run resumes from it later. The
        run's task is interrupted at once wherever it waits (a write it was making may
        land or not: whoever drives the run next re-reads the journal). Idempotent: the
        first reason wins.
        """
        if self.torn_down is None:
            self.teardown_cause = cause
            self.torn_down = self._torn_down_error(reason)
            self.stopping = True
            task = self.task
            if task is not None and task is not asyncio.current_task() and not task.done():
                task.cancel()
            self.handlers.cancel_all(cast("Run", self))  # only ever mixed into Run
        return self._torn_down_error(self.torn_down.reason)

    def _torn_down_error(self, reason: str) -> RunTornDown:
        return RunTornDown(
            f"workflow {self.id!r} is no longer driven by this engine ({reason}); it resumes "
            "from its journal. Do not catch RunTornDown: re-raise it.",
            workflow_id=self.id,
            reason=reason,
        )

    def check_alive(self) -> None:
        """Raise :class:`RunTornDown` if this run was torn down (or must stop now)."""
        if self.torn_down is None and self.stopping:
            self.tear_down(self._stop_reason)
        if self.torn_down is not None:
            raise self._torn_down_error(self.torn_down.reason)

    def teardown_for(self, exc: BaseException) -> RunTornDown | None:
        """The :class:`RunTornDown` that replaces ``exc`` in workflow code, if any.

        Engine failures (storage errors, deposition, a write superseded by another
        writer) tear the run down; so does the cancellation that interrupts a live
        wait when the run is torn down. Anything else is the workflow's own business.
        """
        if isinstance(exc, RunTornDown):
            return None
        if isinstance(exc, ENGINE_FAILURES):
            return self.tear_down(_describe(exc), exc)
        if isinstance(exc, asyncio.CancelledError) and self.torn_down is not None:
            return self._torn_down_error(self.torn_down.reason)
        return None

    @property
    def transiently_stopped(self) -> bool:
        """True when a transient failure (storage) tore the run down: worth re-driving."""
        return self.torn_down is not None and isinstance(self.teardown_cause, TRANSIENT_FAILURES)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, Superseded):
        return "another writer advanced or ended the run"
    if isinstance(exc, EngineDeposedError):
        return f"this engine lost ownership: {exc}"
    return f"{type(exc).__name__}: {exc}"
