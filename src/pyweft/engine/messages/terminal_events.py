"""The terminal event of a run, from the store: how ``run_events`` streams end.

Live events come from the runs this engine drives. A run that had already
finished when the stream was made, or that finishes in another process, emits
nothing here, so a run's stream also watches the run's stored state and ends
with a terminal event made from it. A run driven here is watched through its
completion future (its own terminal event reaches the stream first); any other
run through the store, at most every ``poll_interval``, as ``result()`` does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from pyweft.engine.replay.events import WorkflowEvent
from pyweft.engine.replay.info import to_datetime
from pyweft.engine.replay.records import TERMINAL_STATUSES, WorkflowState
from pyweft.errors import EngineClosedError, PyweftError, WorkflowNotFoundError

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore

log = logging.getLogger("pyweft.events")


def terminal_event(state: WorkflowState) -> WorkflowEvent:
    """The event a finished run's stream ends with: its status, at its end time."""
    return WorkflowEvent(
        kind=state.status,  # type: ignore[arg-type]
        workflow_id=state.id,
        workflow_type=state.type,
        at=to_datetime(state.ended_at if state.ended_at is not None else state.updated_at),
    )


async def watch_end(core: EngineCore, workflow_id: str) -> WorkflowEvent | None:
    """Wait until the run is finished; its terminal event. ``None`` if the engine closes.

    An id no run has (yet) is looked for again: the stream may be made before the
    run is started, by this process or another.
    """
    delay = 0.01
    while core.state == "open":
        await core.settled(workflow_id)
        run = core.runs.get(workflow_id)
        if run is not None:
            try:
                return terminal_event(await asyncio.shield(run.done))
            except EngineClosedError:
                pass  # no longer driven here (suspended, torn down): watch the store
        else:
            try:
                state = await core.visibility.state(workflow_id)
            except WorkflowNotFoundError:
                pass
            except EngineClosedError:
                return None
            except PyweftError as exc:  # a storage failure: look again later
                log.debug("events of %s: cannot read its state yet: %s", workflow_id, exc)
            else:
                if state.status in TERMINAL_STATUSES:
                    return terminal_event(state)
        await asyncio.sleep(delay)
        delay = min(delay * 2, core.poll_interval)
    return None
