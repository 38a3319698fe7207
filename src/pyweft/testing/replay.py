"""The replay checker: run new workflow code against recorded histories.

``export_history(engine, workflow_id)`` (or ``pyweft workflows export ID``) takes a
run's stored records (its state, journal, open steps, version pins) as a JSON-ready
dict. ``replay(history, workflows)`` (or ``pyweft replay FILE --app MODULE``) loads
them into a throwaway memory store and replays them with the given code on a
virtual clock. Nothing past the recorded journal runs: the first step the code
would run for real stops the replay. The result says whether the code replays
the history, and if not, the first step where it differs and how.

Checked: a reordered, inserted, removed or changed step (another activity, another
kind of step), a ``ctx.get_version`` pin the code no longer accepts, and code that
finishes before using every recorded step. Use it in CI against histories exported
from production before deploying new code.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyweft.clock import VirtualClock
from pyweft.engine.control.core import create_ops
from pyweft.engine.engine import Engine
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.run import Run
from pyweft.errors import InvalidArgumentError
from pyweft.storage.base import Put
from pyweft.storage.memory import MemoryStorage

FORMAT = "pyweft-history"
FORMAT_VERSION = 1
_STEP = re.compile(r"at step (\d+)")


async def export_history(engine: Engine, workflow_id: str) -> dict[str, Any]:
    """The stored records of one run, JSON-ready (values base64), for :func:`replay`."""
    await engine.describe(workflow_id)  # WorkflowNotFoundError for an unknown id
    base, start, end = keys.run_range(workflow_id)
    rows = await engine.storage.scan(base, start=start, end=end)
    found = [(k, v) for k, v in rows if keys.belongs_to_run(k, base)]
    state = records.decode_state(dict(found)[base], key=base)
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "workflow_id": state.id,
        "workflow_type": state.type,
        "workflow_version": state.version,
        "status": state.status,
        "steps": sum(1 for k, _ in found if k.startswith(keys.journal_prefix(workflow_id))),
        "records": [
            {"key": k[len(base) :], "value": base64.b64encode(v).decode()} for k, v in found
        ],
    }


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplayResult:
    """What replaying one history with new code found."""

    workflow_id: str
    workflow_type: str
    ok: bool
    recorded_steps: int
    step: int | None = None  # the first step where the code differs (when known)
    error_type: str | None = None
    message: str | None = None

    def __str__(self) -> str:
        if self.ok:
            return (
                f"{self.workflow_id} ({self.workflow_type}): replays all "
                f"{self.recorded_steps} recorded step(s)"
            )
        where = f" at step {self.step}" if self.step is not None else ""
        return f"{self.workflow_id} ({self.workflow_type}): DIFFERS{where}: {self.message}"


def _check(history: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    if not isinstance(history, Mapping) or history.get("format") != FORMAT:
        raise InvalidArgumentError(
            "not a pyweft history: export one with `pyweft workflows export ID` or "
            "pyweft.testing.export_history(engine, id)"
        )
    if history.get("version") != FORMAT_VERSION:
        raise InvalidArgumentError(
            f"history format version {history.get('version')!r} is not {FORMAT_VERSION}; "
            "export it again with this pyweft"
        )
    base = keys.wf(str(history["workflow_id"]))
    try:
        return [
            (base + str(r["key"]), base64.b64decode(str(r["value"]), validate=True))
            for r in history["records"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"the history's records are damaged: {exc}") from exc


async def replay(
    history: Mapping[str, Any],
    workflows: Iterable[Callable[..., Any]],
    *,
    activities: Iterable[Callable[..., Any]] = (),
    timeout: float = 30.0,
) -> ReplayResult:
    """Replay ``history`` (from :func:`export_history`) with ``workflows``' code."""
    rows = _check(history)
    workflow_id = str(history["workflow_id"])
    base = keys.wf(workflow_id)
    raw = dict(rows).get(base)
    if raw is None:
        raise InvalidArgumentError("the history holds no run state record")
    state = records.decode_state(raw, key=base)
    store = MemoryStorage()
    clock = VirtualClock(state.updated_at)
    engine = Engine(store, workflows=workflows, activities=activities, clock=clock, recover=False)
    definition = engine._core.workflows.get(state.type)
    if definition is None:
        raise InvalidArgumentError(
            f"the code given registers no workflow {state.type!r}; pass the module or "
            "functions that define it"
        )
    # Replayed as a running run of the new code's version; nothing stays but the journal.
    state.status, state.result, state.error = "running", None, None
    state.cancel_requested, state.ended_at, state.deadline = False, None, None
    state.start_at, state.version = None, definition.version
    ops, _ = create_ops(state, records.encode(state))
    ops += [Put(key=k, value=v) for k, v in rows if k != base]
    await store.batch(ops)
    recorded = sum(1 for k, _ in rows if k.startswith(keys.journal_prefix(workflow_id)))
    driven: list[Run] = []

    def stop_at_frontier(run: Run) -> None:
        run.stop("the replay reached the end of the recorded history")

    try:
        await engine.open()
        engine._core.services_or_raise().on_live = stop_at_frontier
        await engine.resume(workflow_id)
        run = engine._core.runs.get(workflow_id)
        if run is not None:
            driven.append(run)
        deadline = time.monotonic() + timeout
        while engine.is_running_here(workflow_id):
            if time.monotonic() > deadline:
                raise TimeoutError(f"replaying {workflow_id!r} took over {timeout:g}s")
            await asyncio.sleep(0.001)
        info = await engine.describe(workflow_id)
    finally:
        await engine.shutdown()
        await store.close()
    used = driven[0].steps_taken if driven else None
    return _verdict(workflow_id, state.type, recorded, info.status, info.error, used)


def _verdict(
    workflow_id: str,
    workflow_type: str,
    recorded: int,
    status: str,
    error: records.ErrorInfo | None,
    used: int | None,
) -> ReplayResult:
    common: dict[str, Any] = {"workflow_id": workflow_id, "workflow_type": workflow_type}
    if status == "blocked" and error is not None:
        found = _STEP.search(error.message)
        return ReplayResult(
            **common,
            ok=False,
            recorded_steps=recorded,
            step=int(found.group(1)) if found else None,
            error_type=error.type,
            message=error.message,
        )
    if status in records.TERMINAL_STATUSES and used is not None and used < recorded:
        return ReplayResult(
            **common,
            ok=False,
            recorded_steps=recorded,
            step=used + 1,
            error_type="NonDeterminismError",
            message=f"the code finished after {used} step(s), but the history records "
            f"{recorded}: a step was removed",
        )
    return ReplayResult(**common, ok=True, recorded_steps=recorded)
