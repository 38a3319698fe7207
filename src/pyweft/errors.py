"""Every public pyweft error, under one root.

Each error's ``code`` equals its class name and never changes once released,
so callers (and the HTTP edge later) can match on it. Messages say what went
wrong and what to do; identifiers needed to act ride along as attributes.
The full list is documented in ``docs/reference/errors.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from pyweft.engine.replay.drift import CodeDrift


class PyweftError(Exception):
    """Root of every error pyweft raises on purpose."""

    code: ClassVar[str] = "PyweftError"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.code = cls.__name__


# --- configuration and input -------------------------------------------------


class ConfigurationError(PyweftError):
    """An engine or storage option is invalid (bad URL, unknown mode...)."""


class InvalidArgumentError(PyweftError, ValueError):
    """An argument to a public method is out of range or malformed (limit, cursor, id...)."""


class InvalidDurationError(PyweftError, ValueError):
    """A duration could not be parsed or is negative."""


class PayloadError(PyweftError, ValueError):
    """A value cannot be encoded or decoded, or is larger than allowed.

    ``path`` names the offending field, e.g. ``args[0].items[2].price``.
    """

    def __init__(self, message: str, *, path: str = "$") -> None:
        super().__init__(message)
        self.path = path


class WorkflowNotRegisteredError(PyweftError, LookupError):
    """A workflow name or function is not registered with the engine."""

    def __init__(self, message: str, *, workflow_type: str) -> None:
        super().__init__(message)
        self.workflow_type = workflow_type


class ActivityNotRegisteredError(PyweftError, LookupError):
    """An activity called by name is registered neither on the workflow nor the engine."""

    def __init__(self, message: str, *, activity_name: str) -> None:
        super().__init__(message)
        self.activity_name = activity_name


class DefinitionError(PyweftError, TypeError):
    """A decorated workflow or activity is malformed (wrong signature, duplicate name...)."""


# --- workflow lifecycle -------------------------------------------------------


class WorkflowNotFoundError(PyweftError, LookupError):
    """No run with this id exists in the store."""

    def __init__(self, message: str, *, workflow_id: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id


class InvalidScheduleError(InvalidArgumentError):
    """A schedule's cron expression, interval, time zone or option is invalid."""


class ScheduleNotFoundError(PyweftError, LookupError):
    """No schedule with this id exists in the store."""

    def __init__(self, message: str, *, schedule_id: str) -> None:
        super().__init__(message)
        self.schedule_id = schedule_id


class ScheduleAlreadyExistsError(PyweftError):
    """``create_schedule`` with an id that is taken."""

    def __init__(self, message: str, *, schedule_id: str) -> None:
        super().__init__(message)
        self.schedule_id = schedule_id


class WorkflowAlreadyExistsError(PyweftError):
    """``start`` with an id (or idempotency key) that already maps to a run."""

    def __init__(self, message: str, *, workflow_id: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id


class QueueNotFoundError(PyweftError, LookupError):
    """A workflow queue name that is not registered with the engine."""

    def __init__(self, message: str, *, queue: str) -> None:
        super().__init__(message)
        self.queue = queue


class QueueDeduplicatedError(PyweftError):
    """``enqueue`` with a deduplication id that a queued or running run already holds.

    ``workflow_id`` is the run holding it: wait for it, or pick another id.
    """

    def __init__(
        self, message: str, *, queue: str, deduplication_id: str, workflow_id: str
    ) -> None:
        super().__init__(message)
        self.queue = queue
        self.deduplication_id = deduplication_id
        self.workflow_id = workflow_id


class WorkflowFailedError(PyweftError):
    """``result()`` of a run that ended in failure; ``error`` describes the cause."""

    def __init__(
        self, message: str, *, workflow_id: str, error_type: str, error_message: str
    ) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.error_type = error_type
        self.error_message = error_message


class WorkflowCancelledError(PyweftError):
    """``result()`` of a run that was cancelled."""

    def __init__(self, message: str, *, workflow_id: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id


class ResultTimeoutError(PyweftError, TimeoutError):
    """``result(timeout=...)`` ran out before the run finished (the run goes on)."""

    def __init__(self, message: str, *, workflow_id: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id


class NonDeterminismError(PyweftError):
    """Replay found a recorded step that differs from what the code now asks for.

    ``drift`` holds the same as fields: the step, what the journal recorded there and
    what the code asked for (``describe(id).drift`` of the blocked run)."""

    def __init__(
        self, message: str, *, workflow_id: str, step: int, drift: CodeDrift | None = None
    ) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.step = step
        self.drift = drift


class WorkflowTerminalError(PyweftError):
    """The run already finished, so it cannot take a signal, query or update."""

    def __init__(self, message: str, *, workflow_id: str, status: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.status = status


class WorkflowTimeoutError(PyweftError, TimeoutError):
    """``result()`` of a run that overran its ``execution_timeout``."""

    def __init__(self, message: str, *, workflow_id: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id


class WorkflowUsageError(PyweftError):
    """An API used where it cannot work: the workflow context in an unsupported way (e.g.
    ``wait_until`` in a branch), or a blocking ``pyweft.sync`` call on the engine's own loop."""


class WaitTimeoutError(PyweftError, TimeoutError):
    """A ``wait_for_signal`` or ``wait_for_update`` inside a workflow ran out of time."""

    def __init__(self, message: str, *, workflow_id: str, step: int) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.step = step


class QueryNotFoundError(PyweftError, LookupError):
    """The run has no query handler with this name."""

    def __init__(self, message: str, *, workflow_id: str, query: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.query = query


class QueryUnavailableError(PyweftError):
    """The run is not live in this engine (suspended, pending, or driven elsewhere)."""

    def __init__(self, message: str, *, workflow_id: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id


class QueryFailedError(PyweftError):
    """A query handler raised, in the process that drives the run (not this one)."""

    def __init__(
        self, message: str, *, workflow_id: str, query: str, error_type: str, error_message: str
    ) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.query = query
        self.error_type = error_type
        self.error_message = error_message


class UpdateRejectedError(PyweftError):
    """The update's validator rejected it; nothing was written."""

    def __init__(self, message: str, *, workflow_id: str, update: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.update = update


class UpdateFailedError(PyweftError):
    """The update handler raised; the error type and message are preserved."""

    def __init__(
        self, message: str, *, update_id: str, error_type: str, error_message: str
    ) -> None:
        super().__init__(message)
        self.update_id = update_id
        self.error_type = error_type
        self.error_message = error_message


class UpdateTimeoutError(PyweftError, TimeoutError):
    """No answer within ``timeout``. The update stays queued; fetch it later by ``update_id``."""

    def __init__(self, message: str, *, workflow_id: str, update_id: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.update_id = update_id


class UpdateNotFoundError(PyweftError, LookupError):
    """No update with this id is known (never sent, or its response expired)."""

    def __init__(self, message: str, *, update_id: str) -> None:
        super().__init__(message)
        self.update_id = update_id


class ReviewNotFoundError(PyweftError, LookupError):
    """No review with this id exists."""

    def __init__(self, message: str, *, review_id: str) -> None:
        super().__init__(message)
        self.review_id = review_id


class ReviewAlreadyDecidedError(PyweftError):
    """The review already has a decision (or expired); a second one is refused."""

    def __init__(self, message: str, *, review_id: str, status: str) -> None:
        super().__init__(message)
        self.review_id = review_id
        self.status = status


class ReviewTimeoutError(PyweftError, TimeoutError):
    """``ctx.review(..., timeout=...)`` ran out before anyone decided."""

    def __init__(self, message: str, *, review_id: str) -> None:
        super().__init__(message)
        self.review_id = review_id


class ChildWorkflowError(PyweftError):
    """A child workflow awaited by its parent failed, was cancelled or timed out."""

    def __init__(
        self, message: str, *, child_id: str, status: str, error_type: str, error_message: str
    ) -> None:
        super().__init__(message)
        self.child_id = child_id
        self.status = status
        self.error_type = error_type
        self.error_message = error_message


class NestingLimitError(PyweftError):
    """Child workflows may nest only so deep (10 levels)."""

    def __init__(self, message: str, *, workflow_id: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id


class VersionMismatchError(PyweftError):
    """A stored run's workflow version differs from the registered code, or a
    ``ctx.get_version`` pin is outside the supported range."""

    def __init__(
        self,
        message: str,
        *,
        workflow_id: str,
        stored_version: str,
        registered_version: str,
        drift: CodeDrift | None = None,
    ) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.stored_version = stored_version
        self.registered_version = registered_version
        self.drift = drift


class IdempotencyKeySpentError(PyweftError):
    """The idempotency key maps to a run that was purged; it will not start a new run."""

    def __init__(self, message: str, *, idempotency_key: str, workflow_id: str) -> None:
        super().__init__(message)
        self.idempotency_key = idempotency_key
        self.workflow_id = workflow_id


class BulkScopeError(InvalidArgumentError):
    """A bulk operation's filter does not narrow it down enough (no scoped filter)."""


class BulkOperationConfirmationError(PyweftError):
    """A bulk commit's confirmation token is unknown, spent, expired, or was issued for
    another operation or filter. Run the dry run again and commit with its token."""


class BulkDeleteRequiresTerminalWorkflowsError(PyweftError):
    """A bulk delete's filter matches runs that have not finished; only finished runs
    can be deleted. Narrow the filter (e.g. ``status="completed"``)."""

    def __init__(self, message: str, *, running: list[str]) -> None:
        super().__init__(message)
        self.running = running


class LeaseAcquisitionTimeoutError(PyweftError, TimeoutError):
    """``ownership="lease"``: another engine kept the store lease past ``lease_wait_timeout``."""

    def __init__(self, message: str, *, waited_s: float, held_by: str | None) -> None:
        super().__init__(message)
        self.waited_s = waited_s
        self.held_by = held_by


class LeaseCorruptedError(PyweftError):
    """The stored lease is damaged (bad epoch bytes, or a holder without an epoch).

    The engine fails closed rather than guess who owns the store.
    """


class LeaseNotHeldError(PyweftError):
    """``ownership="lease"``: the engine was used before it acquired the store lease."""


class EngineDeposedError(PyweftError):
    """Another engine took over the store (or this run's claim); this engine stopped writing."""

    def __init__(self, message: str, *, workflow_id: str | None = None) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id


class OwnershipModeMismatchError(PyweftError):
    """The store is used by engines with a different ownership mode; they must not mix."""

    def __init__(self, message: str, *, configured_mode: str, stored_mode: str) -> None:
        super().__init__(message)
        self.configured_mode = configured_mode
        self.stored_mode = stored_mode


class EngineClosedError(PyweftError, RuntimeError):
    """The engine is not running (not entered yet, or already shut down)."""


class StoreInUseError(PyweftError):
    """Another engine already drives this store with ``ownership="none"``.

    Two engines driving one store without an ownership mode would run the
    same steps twice, so the second one refuses to open. ``holder`` describes
    the engine that has it (pid, host, since when), when known.
    """

    def __init__(self, message: str, *, holder: str | None = None) -> None:
        super().__init__(message)
        self.holder = holder


class RunTornDown(BaseException):
    """The engine stopped driving this run; raised into workflow code at once.

    It derives from ``BaseException`` (like ``asyncio.CancelledError``) so that
    ``except Exception`` around a step cannot catch it: a storage failure,
    a lost lease or claim, a suspend or an engine shutdown is the engine's own
    business, never an outcome the workflow may react to. The run keeps its
    journal and resumes from it (in this engine once storage recovers, or in
    whichever engine owns it next). Re-raise it if you catch ``BaseException``.
    """

    code: ClassVar[str] = "RunTornDown"

    def __init__(self, message: str, *, workflow_id: str, reason: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.reason = reason


# --- activities -------------------------------------------------------------------


class ActivityError(PyweftError):
    """An activity failed for good (retries exhausted, non-retryable, or out of budget).

    Raised into the workflow, where it may be caught. ``error_type``,
    ``error_message`` and ``error_traceback`` preserve the original exception
    across restarts; ``cause`` (also ``__cause__``) is that exception rebuilt, when
    its class is loaded in this process and can be built from its message, else
    ``None``: branch on ``isinstance(err.cause, X)`` or on ``err.error_type``.
    """

    def __init__(
        self,
        message: str,
        *,
        activity_name: str,
        step: int,
        attempts: int,
        error_type: str,
        error_message: str,
        error_traceback: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.activity_name = activity_name
        self.step = step
        self.attempts = attempts
        self.error_type = error_type
        self.error_message = error_message
        self.error_traceback = error_traceback
        self.cause = cause


class ApplicationError(PyweftError):
    """Raise it from an activity to fail the attempt on your terms.

    ``non_retryable=True`` stops retries at once, whatever the retry policy says.
    ``type`` names the failure (recorded as the ``error_type`` the workflow sees,
    and matched by ``RetryPolicy(non_retryable=[...])``); it defaults to
    ``"ApplicationError"``. ``details`` is any JSON-like value kept with the error.
    """

    def __init__(
        self,
        message: str,
        *,
        type: str | None = None,
        non_retryable: bool = False,
        details: object = None,
    ) -> None:
        super().__init__(message)
        self.type = type
        self.non_retryable = non_retryable
        self.details = details


class ActivityTimeoutError(PyweftError, TimeoutError):
    """One activity attempt ran out of time (a retryable failure).

    ``kind`` says which limit: ``"attempt"`` (its ``timeout``), ``"heartbeat"`` (it did
    not heartbeat within ``heartbeat_timeout``) or ``"schedule_to_close"`` (the budget
    of all attempts was spent).
    """

    def __init__(self, message: str, *, kind: str = "attempt") -> None:
        super().__init__(message)
        self.kind = kind


class ActivityTokenNotFoundError(PyweftError, LookupError):
    """No activity waits for this async-completion token: it is malformed, was never
    issued, was already completed or failed, or its run moved on (retry, cancel, end)."""

    def __init__(self, message: str, *, token: str) -> None:
        super().__init__(message)
        self.token = token


class ActivityReconciliationError(PyweftError):
    """A keyed activity was dispatched before a crash and its outcome cannot be proven:
    its ``verify`` answered "completed, result unavailable" or "indeterminate", raised,
    or the activity has no ``verify``. The step fails closed instead of running the
    side effect again; ``key`` is the idempotency key to look up."""

    def __init__(self, message: str, *, key: str = "", verdict: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.verdict = verdict


class ActivityCancelledError(PyweftError):
    """Raised inside a plain ``def`` activity by ``heartbeat()`` or ``check_cancelled()``
    once its attempt is cancelled (the run was cancelled or timed out, the attempt's
    timeout fired, or its branch lost a race). Let it propagate: whatever the activity
    returns after that is discarded."""

    def __init__(self, message: str, *, workflow_id: str, step: int, reason: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.step = step
        self.reason = reason


# --- storage ----------------------------------------------------------------------


class StorageError(PyweftError):
    """The store could not complete an operation (I/O, lock contention, lost connection).

    Raised, never reported as a failed condition. The driver error is kept
    as ``__cause__``.
    """


class StorageClosedError(StorageError):
    """An operation was attempted on a storage adapter after ``close()``."""


class StorageCapabilityError(StorageError):
    """The adapter lacks a capability a feature needs (e.g. conditional batches)."""


class SchemaVersionError(StorageError):
    """The store was written by a newer pyweft whose schema this version cannot read."""


class CorruptRecordError(PyweftError):
    """A stored record could not be decoded; ``key`` names it.

    Recovery quarantines the run it belongs to and carries on with the others;
    ``pyweft doctor`` lists every such key.
    """

    def __init__(self, message: str, *, key: str, workflow_id: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.workflow_id = workflow_id


class StateConflictError(PyweftError):
    """A ``ctx.state`` write lost the compare-and-swap race too many times in a row."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name


class HistoryLimitError(PyweftError):
    """A run recorded more steps than its history limit allows; it ends ``failed``."""

    def __init__(self, message: str, *, workflow_id: str, limit: int) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.limit = limit


# --- the HTTP server and client -----------------------------------------------------


class AuthenticationError(PyweftError):
    """The server needs a credential and got none, or one it does not accept (HTTP 401)."""


class PermissionDeniedError(PyweftError):
    """The credential is valid but lacks the scope this operation needs (HTTP 403).

    ``required`` lists the scopes, any one of which would have been enough.
    """

    def __init__(self, message: str, *, required: list[str] | None = None) -> None:
        super().__init__(message)
        self.required = list(required or [])


class RateLimitedError(PyweftError):
    """Too many requests from this principal in the current window (HTTP 429)."""

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RequestTooLargeError(PyweftError):
    """A request body is larger than the server accepts (HTTP 413)."""

    def __init__(self, message: str, *, max_bytes: int) -> None:
        super().__init__(message)
        self.max_bytes = max_bytes


class ServerError(PyweftError):
    """The server failed in a way it does not describe (HTTP 5xx), or could not be reached.

    ``status`` is the HTTP status (0 when no response arrived).
    """

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class LeaseLostWarning(RuntimeWarning):
    """This engine lost the store lease to another engine and stopped itself."""


class SecondInstanceWarning(RuntimeWarning):
    """Another engine instance appears to be running on the same store."""


__all__ = [
    "ActivityError",
    "ActivityNotRegisteredError",
    "ActivityTimeoutError",
    "AuthenticationError",
    "ChildWorkflowError",
    "ConfigurationError",
    "CorruptRecordError",
    "DefinitionError",
    "EngineClosedError",
    "EngineDeposedError",
    "HistoryLimitError",
    "IdempotencyKeySpentError",
    "InvalidArgumentError",
    "InvalidDurationError",
    "LeaseAcquisitionTimeoutError",
    "LeaseCorruptedError",
    "LeaseLostWarning",
    "LeaseNotHeldError",
    "NestingLimitError",
    "NonDeterminismError",
    "OwnershipModeMismatchError",
    "PayloadError",
    "PermissionDeniedError",
    "PyweftError",
    "QueryNotFoundError",
    "QueueDeduplicatedError",
    "QueueNotFoundError",
    "QueryUnavailableError",
    "QueryFailedError",
    "RateLimitedError",
    "RequestTooLargeError",
    "ResultTimeoutError",
    "ReviewAlreadyDecidedError",
    "ReviewNotFoundError",
    "ReviewTimeoutError",
    "RunTornDown",
    "SchemaVersionError",
    "SecondInstanceWarning",
    "ServerError",
    "StorageCapabilityError",
    "StorageClosedError",
    "StorageError",
    "StoreInUseError",
    "UpdateFailedError",
    "UpdateNotFoundError",
    "UpdateRejectedError",
    "UpdateTimeoutError",
    "VersionMismatchError",
    "WaitTimeoutError",
    "WorkflowAlreadyExistsError",
    "WorkflowCancelledError",
    "WorkflowFailedError",
    "WorkflowNotFoundError",
    "WorkflowNotRegisteredError",
    "WorkflowTerminalError",
    "WorkflowTimeoutError",
    "WorkflowUsageError",
]
