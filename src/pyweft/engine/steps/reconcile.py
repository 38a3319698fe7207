"""Keyed reconciliation: a keyed activity's side effect is not run blindly twice.

``@activity(idempotency_key=..., verify=...)``. Before each attempt of a keyed
activity the engine commits a dispatch marker (the key, in the step's progress
record, through the run's fenced commit). The marker goes away with the step's
outcome, or when an attempt fails by raising (its outcome is known). It stays
when the outcome is unknown: the process died, the engine stopped driving the
run, or the attempt timed out or was cancelled while the function may still
have acted. The next attempt then calls ``verify(key, *args)`` first, and does
what its answer says:

- ``VerifyResult.not_completed()``: run the activity (a new marker first);
- ``VerifyResult.completed(result)``: record ``result`` as the step's outcome, run
  nothing;
- ``VerifyResult.completed_result_unavailable()`` or
  ``VerifyResult.indeterminate()``: fail closed, the step fails with
  :class:`~pyweft.errors.ActivityReconciliationError` carrying the key, so an
  operator decides. So does a ``verify`` that raises, returns anything else, or
  is missing.

Activities without a key stay at-least-once.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from dataclasses import dataclass
from typing import Any, Literal

from pyweft.definitions import ActivityDefinition
from pyweft.engine.replay.run import Run
from pyweft.errors import ActivityReconciliationError, DefinitionError

Verdict = Literal["not_completed", "completed", "completed_result_unavailable", "indeterminate"]
MAX_KEY_CHARS = 500


@dataclass(frozen=True, kw_only=True, slots=True)
class VerifyResult:
    """What ``verify(key, *args)`` found in the external system. Use the constructors."""

    verdict: Verdict
    result: Any = None
    reason: str = ""

    @classmethod
    def not_completed(cls) -> VerifyResult:
        """The side effect did not happen: the activity may run."""
        return cls(verdict="not_completed")

    @classmethod
    def completed(cls, result: Any = None) -> VerifyResult:
        """It happened, and ``result`` is what the activity would have returned."""
        return cls(verdict="completed", result=result)

    @classmethod
    def completed_result_unavailable(cls, reason: str = "") -> VerifyResult:
        """It happened, but its result cannot be rebuilt: fail closed."""
        return cls(verdict="completed_result_unavailable", reason=reason)

    @classmethod
    def indeterminate(cls, reason: str = "") -> VerifyResult:
        """It cannot be told whether it happened: fail closed."""
        return cls(verdict="indeterminate", reason=reason)


def key_for(act: ActivityDefinition, args: tuple[Any, ...], per_call: str | None) -> str | None:
    """The step's idempotency key: given with the call, else from the definition."""
    if per_call is not None:
        key: object = per_call
    elif act.idempotency_key is not None:
        key = act.idempotency_key(*args)
    else:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
        raise DefinitionError(
            f"activity {act.name!r}: the idempotency key must be a non-empty string of at "
            f"most {MAX_KEY_CHARS} characters, got {key!r}"
        )
    return key


async def verify(
    run: Run, act: ActivityDefinition, key: str, args: tuple[Any, ...]
) -> VerifyResult:
    """Ask ``act.verify`` about ``key``; anything but a clear answer is indeterminate."""
    check = act.verify
    if check is None:
        return VerifyResult.indeterminate(
            "the activity has no verify function, so a dispatch whose outcome is unknown "
            "cannot be reconciled"
        )
    try:
        if asyncio.iscoroutinefunction(check):
            answer = await check(key, *args)
        else:
            loop = asyncio.get_running_loop()
            call = functools.partial(contextvars.copy_context().run, check, key, *args)
            answer = await loop.run_in_executor(run.services.executor, call)
    except Exception as exc:
        return VerifyResult.indeterminate(f"verify raised {type(exc).__name__}: {exc}")
    if not isinstance(answer, VerifyResult):
        return VerifyResult.indeterminate(
            f"verify returned {answer!r}, not a VerifyResult (use VerifyResult.not_completed(), "
            ".completed(result), .completed_result_unavailable() or .indeterminate())"
        )
    return answer


def fail_closed(act: ActivityDefinition, step: int, key: str, answer: VerifyResult) -> Exception:
    why = f": {answer.reason}" if answer.reason else ""
    return ActivityReconciliationError(
        f"activity {act.name!r} (step {step}) was dispatched with idempotency key {key!r} "
        f"before the engine lost track of it, and verify answered {answer.verdict}{why}. "
        "It is not run again: check the key in the external system, then compensate or "
        "fork the run from before this step.",
        key=key,
        verdict=answer.verdict,
    )
