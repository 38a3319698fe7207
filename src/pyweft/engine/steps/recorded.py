"""Values that must come out the same on replay: memo and version pins."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from pyweft.engine.replay import keys
from pyweft.engine.replay.drift import CodeDrift, DriftCall
from pyweft.engine.replay.operations import operation
from pyweft.engine.replay.records import StepRecord
from pyweft.engine.replay.run import Run
from pyweft.errors import InvalidArgumentError, VersionMismatchError
from pyweft.storage.base import Put


@operation
async def memo(run: Run, step: int, key: str, fn: Callable[[], Any]) -> Any:
    """Compute ``fn()`` once and record it; replay returns the recorded value.

    A failure is not recorded: it propagates, and a later execution tries again.
    """
    rec = run.replay(step, "memo", key)
    codec = run.services.codec
    if rec is not None:
        return None if rec.value is None else codec.decode(rec.value)
    await run.enter_live()
    started = run.services.clock.now()
    value = fn()
    if inspect.isawaitable(value):
        value = await value
    payload = run.encode_result(value, f"memo {key!r}")
    await run.commit_step(
        StepRecord(
            step=step,
            kind="memo",
            name=key,
            ok=True,
            started_at=started,
            finished_at=run.services.clock.now(),
            value=payload,
        )
    )
    return codec.decode(payload)


def get_version(run: Run, change_id: str, min_supported: int, max_supported: int) -> int:
    """The version pinned for ``change_id`` in this run (pinning it on first use).

    A run reaching this point for the first time while it still has progress
    recorded ahead of it (journal steps or open steps from older code) gets
    ``min_supported``; a run at its live frontier gets ``max_supported``. The
    pin is written with the run's next commit and never changes afterwards.
    """
    if not (isinstance(min_supported, int) and isinstance(max_supported, int)):
        raise InvalidArgumentError("get_version bounds must be integers")
    if min_supported > max_supported:
        raise InvalidArgumentError(
            f"get_version({change_id!r}): min_supported {min_supported} > max {max_supported}"
        )
    pinned = run.version_pins.get(change_id)
    if pinned is None:
        allocated = run.steps_allocated
        recorded_ahead = run.replaying or any(step > allocated for step in run.pendings)
        pinned = min_supported if recorded_ahead else max_supported
        run.version_pins[change_id] = pinned
        key = keys.version_pin(run.id, change_id)
        run.staged[key] = Put(key=key, value=str(pinned).encode())
    if not min_supported <= pinned <= max_supported:
        run.code_drift(  # blocks the run (or fails it), like any other replay drift
            VersionMismatchError(
                f"workflow {run.id!r} pinned change {change_id!r} at version {pinned}, but the "
                f"code now supports {min_supported}..{max_supported}; keep supporting {pinned} "
                "until such runs finish",
                workflow_id=run.id,
                stored_version=str(pinned),
                registered_version=f"{min_supported}..{max_supported}",
                drift=CodeDrift(
                    reason="version_pin",
                    step=None,
                    recorded=DriftCall(
                        kind="version", name=change_id, detail=f"pinned at {pinned}"
                    ),
                    requested=DriftCall(
                        kind="version",
                        name=change_id,
                        detail=f"supports {min_supported}..{max_supported}",
                    ),
                ),
            )
        )
    return pinned
