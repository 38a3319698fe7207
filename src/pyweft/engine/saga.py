"""Sagas: compensate completed steps, newest first, when a later step fails.

Compensations are ordinary activity steps, so they are durable: a crash in the
middle of compensating resumes compensating (replay raises the same failure
and walks the same compensation path), and no compensation runs twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pyweft.errors import ActivityError

if TYPE_CHECKING:
    from pyweft.engine.context import WorkflowContext

log = logging.getLogger("pyweft.saga")


class Saga:
    """Use as ``async with ctx.saga() as saga:``; on an exception the block compensates.

    ``await saga.run(activity, *args, compensate=undo)`` runs a step and, once it
    succeeded, remembers ``undo(result)``; ``saga.add_compensation(fn, *args)``
    remembers any activity call. Compensation failures are logged and skipped so
    the others still run; the original error is re-raised afterwards.
    """

    def __init__(self, ctx: WorkflowContext) -> None:
        self._ctx = ctx
        self._compensations: list[tuple[Callable[..., Any] | str, tuple[Any, ...]]] = []

    def add_compensation(self, activity: Callable[..., Any] | str, *args: Any) -> None:
        self._compensations.append((activity, args))

    async def run(
        self,
        activity: Callable[..., Any] | str,
        *args: Any,
        compensate: Callable[..., Any] | str | None = None,
        **options: Any,
    ) -> Any:
        result = await self._ctx.run(activity, *args, **options)
        if compensate is not None:
            self._compensations.append((compensate, (result,)))
        return result

    async def compensate(self) -> None:
        """Run every registered compensation, newest first, each as a durable step."""
        while self._compensations:
            activity, args = self._compensations.pop()
            try:
                await self._ctx.run(activity, *args)
            except ActivityError as err:
                log.warning("saga compensation %s failed and was skipped: %s", activity, err)

    async def __aenter__(self) -> Saga:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and isinstance(exc, Exception | asyncio.CancelledError):
            await self.compensate()
