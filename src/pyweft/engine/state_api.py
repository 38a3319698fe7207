"""The engine's shared-state surface: ``engine.state``, ``get_state`` and
``inspect_lock``. ``Engine`` inherits it; the work happens in ``engine/state``, imported
on first use so that an engine that never touches shared state does not load it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyweft.clock import Clock

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore
    from pyweft.engine.state.admin import StateAdmin


class StateAPI:
    """Durable shared state and locks seen from outside (mixed into :class:`~pyweft.Engine`)."""

    _core: EngineCore
    clock: Clock
    _state: StateAdmin | None

    @property
    def state(self) -> StateAdmin:
        """Durable shared state (``ctx.state``) seen from outside: ``get``, ``list``,
        ``set``, ``delete`` (docs/guides/state.md)."""
        if self._state is None:
            from pyweft.engine.state.admin import StateAdmin

            self._state = StateAdmin(self._core)
        return self._state

    async def get_state(
        self,
        name: str,
        *,
        workflow_id: str | None = None,
        workflow_type: str | None = None,
        default: Any = None,
    ) -> Any:
        """A durable shared value (``ctx.state``) of a run family (``workflow_id``: the
        top-most parent) or of a workflow type; ``default`` when never written."""
        return await self.state.get(
            name, workflow_id=workflow_id, workflow_type=workflow_type, default=default
        )

    async def inspect_lock(self, name: str) -> dict[str, Any]:
        """A durable lock (``ctx.lock``) as stored: ``permits``, live ``holders`` and
        ``waiters`` (FIFO), each with ``workflow_id`` and ``expires_at``."""
        self._core.services_or_raise()
        from pyweft.engine.state.locks import inspect_lock

        return await inspect_lock(self._core.storage, name, self.clock.now())
