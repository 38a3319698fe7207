"""The engine's run-control surface: wait for a result, cancel, suspend, resume, fail,
and recover every run. ``Engine`` inherits it; the work happens in
``control.commands``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyweft.definitions import Duration
from pyweft.durations import parse_optional_duration
from pyweft.engine.control import commands

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore


class RunControlAPI:
    """What is done to a run from outside (mixed into :class:`~pyweft.Engine`)."""

    _core: EngineCore

    async def result(self, workflow_id: str, *, timeout: Duration | None = None) -> Any:
        """Wait for a run to finish; return its result or raise its failure.

        ``timeout`` bounds the wait only (seconds, ``timedelta`` or ``"30s"``).
        """
        seconds = parse_optional_duration(timeout, field="timeout")
        return await commands.result(self._core, workflow_id, seconds)

    async def cancel(self, workflow_id: str) -> None:
        """Ask a run to stop. The workflow sees ``asyncio.CancelledError`` at its current step.

        Works for running, pending and suspended runs; cancelling a finished
        run does nothing.
        """
        await commands.cancel(self._core, workflow_id)

    async def suspend(self, workflow_id: str) -> None:
        """Pause a run: it keeps its journal, is not recovered, and ``result()`` keeps waiting.

        Suspending a suspended or finished run does nothing. ``resume`` continues it.
        """
        await commands.suspend(self._core, workflow_id)

    async def resume(self, workflow_id: str) -> None:
        """Continue a suspended run here; also re-drives a ``running`` run nobody drives.

        A ``blocked`` run is replayed here at once when this engine registers its
        type and version (it blocks again if the code still drifts); otherwise it is
        set running for an engine that has its code to pick up.

        Raises :class:`WorkflowTerminalError` for a finished run and
        :class:`InvalidArgumentError` for a pending one (it starts on its own).
        """
        await commands.resume(self._core, workflow_id)

    async def fail(self, workflow_id: str, reason: str) -> None:
        """End a run that no engine drives (``blocked``, ``suspended`` or ``pending``) as
        ``failed`` with ``reason``: what to do with a blocked run whose code will not be
        fixed. Its ``result()`` raises :class:`WorkflowFailedError` (``error_type``
        ``"FailedByOperator"``). Raises :class:`WorkflowTerminalError` for a finished
        run and :class:`InvalidArgumentError` for a running one (cancel it instead).
        """
        await commands.fail(self._core, workflow_id, reason)

    async def recover_all(self) -> int:
        """Resume every stored run that is ``running`` and not already driven here, and
        every ``blocked`` run this engine's code may replay now.

        Returns how many runs were resumed. Runs whose workflow type or version is
        not registered are left untouched (and logged) so an engine that has the
        code can run them. Pending (delayed) runs get their start timers.
        """
        return await commands.recover_all(self._core)
