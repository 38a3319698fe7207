"""Schedules declared in code (``@workflow(schedule=..., timezone=...)``), reconciled at open.

An engine makes the store match the code it registers: a declared schedule is
created, or updated when its cron expression or time zone changed; a schedule
that came from code for a workflow this engine registers, and which that code
no longer declares, is deleted. Schedules of workflows this engine does not
register are left alone (another engine may run them), and so are schedules
created through the API, even under the same id (a warning says so).
"""

from __future__ import annotations

import contextlib
import logging

from pyweft.definitions import WorkflowDefinition
from pyweft.engine.schedules.service import Schedules
from pyweft.errors import ScheduleAlreadyExistsError, ScheduleNotFoundError

log = logging.getLogger("pyweft.schedules")


async def reconcile(schedules: Schedules, definitions: dict[str, WorkflowDefinition]) -> None:
    existing = {s.id: s for s in await schedules.list()}
    for name, definition in sorted(definitions.items()):
        current = existing.get(name)
        if definition.schedule is None:
            if current is not None and current.origin == "code":
                with contextlib.suppress(ScheduleNotFoundError):  # another engine was first
                    await schedules.delete(name)
                log.info("schedule %r removed: the code no longer declares it", name)
            continue
        if current is None:
            # Another engine may declare it at the same moment: same code, same schedule.
            with contextlib.suppress(ScheduleAlreadyExistsError):
                await schedules.create(
                    name,
                    name,
                    cron=definition.schedule,
                    timezone=definition.timezone,
                    origin="code",
                )
            continue
        if current.origin != "code":
            log.warning(
                "workflow %r declares schedule=%r, but a schedule created through the API "
                "already has the id %r; the API one is kept and the declaration ignored",
                name,
                definition.schedule,
                name,
            )
            continue
        if current.cron != definition.schedule or current.timezone != definition.timezone:
            await schedules.update(name, cron=definition.schedule, timezone=definition.timezone)
