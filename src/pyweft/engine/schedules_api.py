"""The engine's schedules surface: ``engine.schedules`` and ``create_schedule``.
``Engine`` inherits it; the work happens in ``engine/schedules``, imported on first use
so that an engine (or CLI client) that never touches schedules does not load it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore
    from pyweft.engine.messages.signals import SignalSender
    from pyweft.engine.schedules.records import ScheduleInfo
    from pyweft.engine.schedules.service import Schedules


class SchedulesAPI:
    """Recurring runs on this store (mixed into :class:`~pyweft.Engine`)."""

    _core: EngineCore
    _signals: SignalSender | None
    _schedules: Schedules | None

    @property
    def schedules(self) -> Schedules:
        """Schedules on this store: ``get``, ``list``, ``update``, ``pause``, ``resume``,
        ``delete``, ``trigger``, ``backfill``, ``preview`` (docs/guides/schedules.md)."""
        if self._schedules is None:
            from pyweft.engine.schedules.service import Schedules

            self._schedules = Schedules(self._core, self._signal_sender)
        return self._schedules

    def _signal_sender(self) -> SignalSender:
        assert self._signals is not None, "the engine is not open"
        return self._signals

    async def create_schedule(
        self, schedule_id: str, wf: Callable[..., Any] | str, *args: Any, **options: Any
    ) -> ScheduleInfo:
        """Store a schedule that starts ``wf(*args)`` at every occurrence of ``cron=``
        (in ``timezone=``) or ``every=``; see :meth:`Schedules.create` for the options."""
        return await self.schedules.create(schedule_id, wf, *args, **options)
