"""Markers of a run's control flow, shared by the run and the views of it that async
update handlers get (``handler_runs``), so neither imports the other's module."""

from __future__ import annotations

import contextvars

from pyweft.engine.replay.records import StepRecord
from pyweft.errors import PyweftError
from pyweft.storage.base import Expect, Op

Deferred = list[tuple[StepRecord, list[Op], list[Expect]]]
# Set inside the branches of ctx.race: their step commits are collected, and the
# race commits only the winner's, together with its own record.
RACE_BRANCH: contextvars.ContextVar[Deferred | None] = contextvars.ContextVar(
    "pyweft_race_branch", default=None
)
# Also set inside race branches, one set per enclosing race branch (outermost first): the
# steps whose progress records (open sleeps, activity attempts) the branch wrote, so a
# race can delete a losing branch's records, nested races' included, with its own record.
RACE_PENDINGS: contextvars.ContextVar[tuple[set[int], ...]] = contextvars.ContextVar(
    "pyweft_race_pendings", default=()
)


class Superseded(BaseException):
    """Another writer committed this run's step or state: stop without writing."""


class RunEnding(BaseException):
    """The run must end ``failed`` with ``error`` whatever the workflow catches (e.g. it
    passed its history limit): raised at every ctx call, never catchable as Exception."""

    def __init__(self, error: PyweftError) -> None:
        super().__init__(str(error))
        self.error = error
