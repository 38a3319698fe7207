"""Code drift as data: where a run's code stopped replaying its journal, what the journal
recorded there and what the code asked for instead.

A ``NonDeterminismError`` (or ``VersionMismatchError``) carries a :class:`CodeDrift`;
the run's stored error keeps it (``ErrorInfo.drift``), ``describe()`` returns it as
``WorkflowInfo.drift``, and the server, the HTTP client, the CLI and the dashboard show
it as a two-sided diff. The journal does not keep a step's call arguments, so the
recorded side names the call and its outcome; the requested side also summarises the
arguments, by type only: values may be secrets a payload codec encrypts, and the error
is stored in clear (decision 0036).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pyweft.engine.replay.records import PendingStep, StepRecord

DriftReason = Literal[
    "step_mismatch",  # the journal has another call at this step
    "returned_early",  # the workflow returned while recorded steps were left unreached
    "handler_mismatch",  # a recorded signal or update application has no matching handler
    "version_pin",  # a ctx.get_version pin outside the range the code now supports
    "workflow_version",  # the run's workflow version is not the one registered here
]

_ARGS_SHOWN = 8
_SUMMARY_MAX = 200


@dataclass(frozen=True, kw_only=True, slots=True)
class DriftCall:
    """One side of a drift: a durable call (``kind`` and ``name``), or nothing
    (``kind is None``, ``detail`` says why, e.g. the workflow returned)."""

    kind: str | None
    name: str | None
    args: str | None = None  # the call's arguments by type, e.g. "(str, int)"; None: unknown
    detail: str | None = None  # its outcome or state: "completed", "open", "pinned at 1"...

    def phrase(self) -> str:
        """The call as the error message words it."""
        if self.kind is None:
            return self.detail or "nothing"
        text = f"{self.kind} {self.name!r}" if self.name else self.kind
        if self.args is not None:
            text += f" with arguments {self.args}"
        return f"{text} ({self.detail})" if self.detail else text


@dataclass(frozen=True, kw_only=True, slots=True)
class CodeDrift:
    """Where a run's code no longer replays its journal: ``describe(id).drift``.

    ``step`` is the step number (``None`` for a version pin or a workflow version, which
    are not steps); ``recorded`` is what the journal holds there, ``requested`` what the
    code asked for instead.
    """

    reason: DriftReason
    step: int | None
    recorded: DriftCall
    requested: DriftCall


def _type_of(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, list | tuple):
        return f"{type(value).__name__}[{len(value)}]"
    if isinstance(value, dict):
        return f"dict[{len(value)}]"
    return type(value).__name__


def args_summary(args: Sequence[Any]) -> str:
    """The arguments' types and container sizes, never their values: ``(str, dict[2])``."""
    shown = [_type_of(a) for a in args[:_ARGS_SHOWN]]
    if len(args) > _ARGS_SHOWN:
        shown.append(f"... {len(args) - _ARGS_SHOWN} more")
    text = "(" + ", ".join(shown) + ")"
    return text if len(text) <= _SUMMARY_MAX else text[: _SUMMARY_MAX - 4] + "...)"


def recorded_call(rec: StepRecord) -> DriftCall:
    """The journal's side of a drift: the committed call and how it ended."""
    outcome = "completed" if rec.ok else f"failed: {rec.error.type}" if rec.error else "failed"
    return DriftCall(kind=rec.kind, name=rec.name, detail=outcome)


def open_call(pend: PendingStep) -> DriftCall:
    """The journal's side of a drift at a step still open (its call had not finished)."""
    return DriftCall(kind=pend.kind, name=pend.name, detail="open")


def requested_call(kind: str, name: str, args: Sequence[Any] | None) -> DriftCall:
    return DriftCall(kind=kind, name=name, args=None if args is None else args_summary(args))
