"""Queries on finished runs: answered by replaying the run's journal in the asking engine.

A completed, failed or cancelled run has no memory left to ask, but its journal
rebuilds that memory: the workflow function is run again from the top, every
step returns its recorded outcome (no activity runs, no timer starts), handlers
re-apply the signals and updates recorded for them, and the query handler is
called on the state the function was in when the run ended. Nothing is written:
the replay's committer refuses any write, and the replay stops at the first step
that was never recorded (a cancelled run's interrupted wait, for one).

Cost: one read of the run's records and one replay of its code per query, so
about what recovering the run costs; nothing is kept afterwards.

``QueryUnavailableError`` only when replay is impossible: the run's records are
gone (purged), its workflow type or version is not registered here, or the code
no longer replays its journal.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pyweft.codec import decode_args
from pyweft.engine.replay.recovery import load_run
from pyweft.engine.replay.run import Run, Superseded
from pyweft.errors import QueryNotFoundError, QueryUnavailableError
from pyweft.storage.base import Expect, Op

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore


class _NoWrites:
    """The committer of a replay made to answer a query: it never writes."""

    fence = None

    async def commit(
        self,
        ops: Sequence[Op],
        conditions: Sequence[Expect] = (),
        *,
        workflow_id: str | None = None,
    ) -> bool:
        raise Superseded()  # an engine failure to the run: it is torn down, nothing stored

    async def announce(self) -> None:
        return None


def _stop_at_frontier(run: Run) -> None:
    run.stop("the replay for a query reached the end of the recorded journal")


def _unavailable(workflow_id: str, why: str) -> QueryUnavailableError:
    return QueryUnavailableError(
        f"workflow {workflow_id!r} has finished and cannot be replayed to answer: {why}",
        workflow_id=workflow_id,
    )


async def query_finished(
    core: EngineCore,
    workflow_id: str,
    name: str,
    args: tuple[Any, ...],
    timeout_s: float,
    make_context: Callable[[Run], Any],
) -> Any:
    """Replay the finished run ``workflow_id`` and ask its ``name`` handler."""
    services = core.services_or_raise()
    loaded = await load_run(core.storage, workflow_id)
    if loaded is None:
        raise _unavailable(workflow_id, "its records are gone (purged)")
    state = loaded.state
    definition = core.workflows.get(state.type)
    if definition is None:
        raise _unavailable(workflow_id, f"workflow type {state.type!r} is not registered here")
    if definition.version != state.version:
        raise _unavailable(
            workflow_id,
            f"it ran version {state.version!r} of {state.type!r}, this engine has "
            f"{definition.version!r}",
        )
    replaying = dataclasses.replace(
        services,
        committer=_NoWrites(),  # type: ignore[arg-type]
        on_live=_stop_at_frontier,
        on_idle=lambda _: None,
        children=None,
    )
    run = Run(
        replaying,
        definition,
        state,
        loaded.state_raw,
        loaded.journal,
        {},
        loaded.applied,
        loaded.version_pins,
        loaded.attributes,
    )
    run.cancel_requested = False  # its cancel was delivered already: replay it as recorded

    async def body() -> None:
        values = decode_args(services.codec, state.args, definition.param_types)
        await definition.fn(make_context(run), *values)

    task = asyncio.get_running_loop().create_task(body(), name=f"pyweft-query-replay:{workflow_id}")
    run.task = task
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.gather(task, return_exceptions=True)
    except TimeoutError:
        raise _unavailable(workflow_id, f"replaying it took over {timeout_s:g}s") from None
    finally:
        if not task.done():
            task.cancel()
    if run.drift is not None:
        raise _unavailable(workflow_id, f"its code no longer replays its journal ({run.drift})")
    handler = run.query_handlers.get(name)
    if handler is None:
        known = ", ".join(sorted(run.query_handlers)) or "none"
        raise QueryNotFoundError(
            f"workflow {workflow_id!r} has no query {name!r} (it has: {known})",
            workflow_id=workflow_id,
            query=name,
        )
    return handler(*args)
