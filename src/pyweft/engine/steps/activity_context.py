"""What an activity attempt can see and do: ``pyweft.activity_context()``.

The engine builds one :class:`ActivityContext` per attempt and sets it in a
context variable around the call. ``async def`` activities see it directly;
plain ``def`` activities run in the engine's thread pool inside a *copy* of
the caller's context, so they see it too. Outside an attempt,
:func:`activity_context` raises :class:`~pyweft.errors.WorkflowUsageError`.

The context is the activity's side of the engine: ids and times of the
attempt, fencing tokens for the user's own database, a logger tagged with the
attempt, heartbeats (see :mod:`.heartbeats`) and cancellation.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyweft.errors import ActivityCancelledError, WorkflowUsageError

if TYPE_CHECKING:
    from pyweft.engine.steps.async_completion import AsyncPending
    from pyweft.engine.steps.heartbeats import Heartbeats

_CURRENT: contextvars.ContextVar[ActivityContext | None] = contextvars.ContextVar(
    "pyweft_activity_context", default=None
)


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


class ActivityContext:
    """The activity attempt running now. Get it with ``pyweft.activity_context()``.

    Ids: ``workflow_id``, ``workflow_type``, ``activity`` (its registered name),
    ``step`` (the step number in the workflow's journal; the same for every attempt)
    and ``attempt`` (from 1). Times (timezone-aware UTC): ``scheduled_at`` (when the
    step's first attempt started), ``started_at`` (this attempt) and ``deadline``
    (when this attempt is cut off by its ``timeout`` or the ``schedule_to_close``
    budget, or ``None``).

    Tokens for fencing writes to your own database (see the activities guide):
    ``workflow_execution_token`` changes when another engine takes the run over (and
    differs for a forked run or a new ``continue_as_new`` generation);
    ``attempt_token`` is unique per attempt and grows with every attempt of the same
    step, takeovers included. Both are strings whose plain ordering (``<`` in Python
    or SQL) is their order in time, for one run and one step respectively.
    """

    __slots__ = (
        "_beats",
        "_cancel_reason",
        "_cancelled",
        "_deadline",
        "_execution_token",
        "_generation",
        "_last_details",
        "_scheduled",
        "_started",
        "_tokens",
        "activity",
        "attempt",
        "step",
        "workflow_id",
        "workflow_type",
    )

    def __init__(
        self,
        *,
        workflow_id: str,
        workflow_type: str,
        activity: str,
        step: int,
        attempt: int,
        scheduled_at: float,
        started_at: float,
        deadline: float | None,
        execution_token: Callable[[], str],
        generation: int = 0,
        last_heartbeat: tuple[Any, bool] = (None, False),
        heartbeats: Heartbeats | None = None,
    ) -> None:
        self.workflow_id = workflow_id
        self.workflow_type = workflow_type
        self.activity = activity
        self.step = step
        self.attempt = attempt
        self._scheduled = scheduled_at
        self._started = started_at
        self._deadline = deadline
        self._execution_token = execution_token  # computed on first use: most never ask
        self._tokens: tuple[str, str] | None = None
        self._generation = generation
        self._last_details = last_heartbeat
        self._beats = heartbeats
        self._cancelled = False
        self._cancel_reason = ""

    # --- times ----------------------------------------------------------------------

    @property
    def scheduled_at(self) -> datetime:
        return _dt(self._scheduled)

    @property
    def started_at(self) -> datetime:
        return _dt(self._started)

    @property
    def deadline(self) -> datetime | None:
        return None if self._deadline is None else _dt(self._deadline)

    # --- tokens ---------------------------------------------------------------------

    @property
    def workflow_execution_token(self) -> str:
        return self._fencing_tokens()[0]

    @property
    def attempt_token(self) -> str:
        return self._fencing_tokens()[1]

    def _fencing_tokens(self) -> tuple[str, str]:
        if self._tokens is None:
            execution = self._execution_token()
            self._tokens = (execution, f"{execution}:{self.step:010d}:{self.attempt:010d}")
        return self._tokens

    # --- logs -----------------------------------------------------------------------

    def extras(self) -> dict[str, Any]:
        """The attributes put on log records made during this attempt."""
        return {
            "workflow_id": self.workflow_id,
            "workflow_type": self.workflow_type,
            "activity": self.activity,
            "step": self.step,
            "attempt": self.attempt,
            "attempt_token": self.attempt_token,
            "workflow_execution_token": self.workflow_execution_token,
        }

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """The ``pyweft.activity`` logger; its records carry :meth:`extras`."""
        return _ACTIVITY_LOG

    # --- heartbeats -----------------------------------------------------------------

    def heartbeat(self, details: Any = None) -> None:
        """Say the attempt is alive and, with ``details``, record its progress.

        Cheap enough for a tight loop: the latest details are written to the store
        at most once per ``heartbeat_throttle`` (and carried to the next attempt when
        this one fails), so a retry, in this process or after a restart, reads them
        from :attr:`last_heartbeat_details`. In a cancelled ``def`` activity it raises
        :class:`~pyweft.errors.ActivityCancelledError`.
        """
        if self._cancelled:
            self._raise_cancelled()
        if self._beats is not None:
            self._beats.beat(details)

    @property
    def last_heartbeat_details(self) -> Any:
        """The details of this step's latest heartbeat before this attempt (``None``
        on a first attempt, or when no earlier attempt heartbeated with details)."""
        return self._last_details[0]

    @property
    def has_heartbeat_details(self) -> bool:
        """True when an earlier attempt of this step left heartbeat details."""
        return self._last_details[1]

    # --- async completion -------------------------------------------------------------

    @property
    def async_token(self) -> str:
        """The token that completes this attempt from outside (see :meth:`complete_async`).

        Deterministic for (run, step, attempt): hand it out before returning."""
        from pyweft.engine.steps.async_completion import make_token

        return make_token(self.workflow_id, self._generation, self.step, self.attempt)

    def complete_async(self) -> AsyncPending:
        """Return this from the activity to leave its result to someone else.

        The step then waits until ``engine.complete_activity(token, result)`` or
        ``engine.fail_activity(token, error)`` is called with :attr:`async_token`,
        from any process (also ``pyweft.sync`` and ``pyweft activities complete``).
        Its ``timeout``, ``schedule_to_close`` and ``heartbeat_timeout`` still apply
        (``engine.heartbeat_activity(token)`` keeps it alive).
        """
        from pyweft.engine.steps.async_completion import AsyncPending

        return AsyncPending(self.async_token)

    # --- cancellation ---------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once the attempt is cancelled; a ``def`` activity should stop then."""
        return self._cancelled

    @property
    def cancel_reason(self) -> str:
        return self._cancel_reason

    def check_cancelled(self) -> None:
        """Raise :class:`~pyweft.errors.ActivityCancelledError` if the attempt is cancelled."""
        if self._cancelled:
            self._raise_cancelled()

    def cancel(self, reason: str) -> None:
        """Mark the attempt cancelled (called by the engine)."""
        if not self._cancelled:
            self._cancel_reason = reason
            self._cancelled = True

    def _raise_cancelled(self) -> None:
        raise ActivityCancelledError(
            f"activity {self.activity!r} (workflow {self.workflow_id!r}, step {self.step}, "
            f"attempt {self.attempt}) was cancelled: {self._cancel_reason}. Stop its work "
            "and let this error propagate.",
            workflow_id=self.workflow_id,
            step=self.step,
            reason=self._cancel_reason,
        )

    def __repr__(self) -> str:
        return (
            f"ActivityContext(workflow_id={self.workflow_id!r}, activity={self.activity!r}, "
            f"step={self.step}, attempt={self.attempt})"
        )


def activity_context() -> ActivityContext:
    """The activity attempt this code runs in.

    Works in ``async def`` and plain ``def`` activities (and in code they call).
    Raises :class:`~pyweft.errors.WorkflowUsageError` anywhere else.
    """
    ctx = _CURRENT.get()
    if ctx is None:
        where = threading.current_thread().name
        raise WorkflowUsageError(
            "activity_context() was called outside an activity (in thread "
            f"{where!r}). Call it from inside a function run with ctx.run(...); a thread "
            "the activity starts itself needs contextvars.copy_context() to see it."
        )
    return ctx


def current_activity() -> ActivityContext | None:
    """The activity attempt running in this context, or ``None`` outside activities."""
    return _CURRENT.get()


def enter(ctx: ActivityContext) -> contextvars.Token[ActivityContext | None]:
    return _CURRENT.set(ctx)


def leave(token: contextvars.Token[ActivityContext | None]) -> None:
    _CURRENT.reset(token)


class _ActivityAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        ctx = _CURRENT.get()
        if ctx is not None:
            kwargs["extra"] = {**ctx.extras(), **(kwargs.get("extra") or {})}
        return msg, kwargs


_ACTIVITY_LOG = _ActivityAdapter(logging.getLogger("pyweft.activity"), {})


def activity_log() -> logging.LoggerAdapter[logging.Logger]:
    """The ``pyweft.activity`` logger; inside an activity its records carry the attempt's ids."""
    return _ACTIVITY_LOG


__all__ = ["ActivityContext", "activity_context", "activity_log", "current_activity"]
