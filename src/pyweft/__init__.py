"""pyweft: durable execution for Python.

Write ordinary ``async def`` workflows; every step survives crashes, restarts
and deploys on an embedded SQLite store.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from pyweft.clock import Clock, SystemClock, VirtualClock
from pyweft.codec import DefaultPayloadCodec, PayloadCodec
from pyweft.definitions import RetryPolicy, activity, workflow
from pyweft.durations import format_duration, parse_duration
from pyweft.engine.bulk import BulkPreview, BulkResult
from pyweft.engine.composition.saga import Saga
from pyweft.engine.context import WorkflowContext
from pyweft.engine.engine import Engine
from pyweft.engine.handle import WorkflowHandle
from pyweft.engine.messages.handler_catalog import HandlerInfo, MessageHandlers
from pyweft.engine.messages.reviews import Escalation, ReviewDecision, ReviewInfo
from pyweft.engine.messages.updates import UpdateRequestHandle
from pyweft.engine.ownership import StoreOwnership
from pyweft.engine.ownership.lease import LeaseHealth
from pyweft.engine.queues import Queue, QueueInfo
from pyweft.engine.replay.drift import CodeDrift, DriftCall
from pyweft.engine.replay.events import WorkflowEvent
from pyweft.engine.replay.info import Page, RunInfo, ScheduleOrigin, StepInfo, WorkflowInfo
from pyweft.engine.replay.records import ErrorInfo
from pyweft.engine.replay.stats import EngineStats
from pyweft.engine.schedules.records import MissedWindow, ScheduleInfo
from pyweft.engine.steps.activity_context import ActivityContext, activity_context
from pyweft.engine.steps.async_completion import PendingActivity
from pyweft.engine.steps.reconcile import VerifyResult
from pyweft.engine.tasks.queue_stats import ActivityQueueInfo
from pyweft.engine.tasks.workers import WorkerInfo
from pyweft.engine.visibility.reader import Group, History, HistoryEvent
from pyweft.errors import (
    ActivityCancelledError,
    ActivityError,
    ActivityNotRegisteredError,
    ActivityReconciliationError,
    ActivityTimeoutError,
    ActivityTokenNotFoundError,
    ApplicationError,
    AuthenticationError,
    BulkDeleteRequiresTerminalWorkflowsError,
    BulkOperationConfirmationError,
    BulkScopeError,
    ChildWorkflowError,
    ConfigurationError,
    CorruptRecordError,
    DefinitionError,
    EngineClosedError,
    EngineDeposedError,
    HistoryLimitError,
    IdempotencyKeySpentError,
    InvalidArgumentError,
    InvalidDurationError,
    InvalidScheduleError,
    LeaseAcquisitionTimeoutError,
    LeaseCorruptedError,
    LeaseLostWarning,
    LeaseNotHeldError,
    NestingLimitError,
    NonDeterminismError,
    OwnershipModeMismatchError,
    PayloadError,
    PermissionDeniedError,
    PyweftError,
    QueryFailedError,
    QueryNotFoundError,
    QueryUnavailableError,
    QueueDeduplicatedError,
    QueueNotFoundError,
    RateLimitedError,
    RequestTooLargeError,
    ResultTimeoutError,
    ReviewAlreadyDecidedError,
    ReviewNotFoundError,
    ReviewTimeoutError,
    RunTornDown,
    ScheduleAlreadyExistsError,
    ScheduleNotFoundError,
    SchemaVersionError,
    SecondInstanceWarning,
    ServerError,
    StateConflictError,
    StorageCapabilityError,
    StorageClosedError,
    StorageError,
    StoreInUseError,
    UpdateFailedError,
    UpdateNotFoundError,
    UpdateRejectedError,
    UpdateTimeoutError,
    VersionMismatchError,
    WaitTimeoutError,
    WorkflowAlreadyExistsError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowNotRegisteredError,
    WorkflowTerminalError,
    WorkflowTimeoutError,
    WorkflowUsageError,
)
from pyweft.storage import MemoryStorage, SQLiteStorage, Storage, open_storage
from pyweft.worker import Worker

try:
    __version__ = version("pyweft")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    # declaring work
    "RetryPolicy",
    "WorkflowContext",
    "activity",
    "workflow",
    # inside an activity
    "ActivityContext",
    "activity_context",
    "VerifyResult",
    # running it
    "Engine",
    "WorkflowHandle",
    "Queue",
    "Escalation",
    "Saga",
    "Worker",
    # what you get back
    "WorkerInfo",
    "ActivityQueueInfo",
    "Group",
    "ErrorInfo",
    "History",
    "HistoryEvent",
    "LeaseHealth",
    "StoreOwnership",
    "EngineStats",
    "ReviewDecision",
    "ReviewInfo",
    "UpdateRequestHandle",
    "WorkflowEvent",
    "Page",
    "PendingActivity",
    "StepInfo",
    "WorkflowInfo",
    "CodeDrift",
    "DriftCall",
    "MessageHandlers",
    "HandlerInfo",
    "BulkPreview",
    "BulkResult",
    "RunInfo",
    "ScheduleInfo",
    "QueueInfo",
    "ScheduleOrigin",
    "MissedWindow",
    # plumbing you may swap
    "Clock",
    "DefaultPayloadCodec",
    "MemoryStorage",
    "PayloadCodec",
    "SQLiteStorage",
    "Storage",
    "SystemClock",
    "VirtualClock",
    "open_storage",
    "parse_duration",
    "format_duration",
    # errors and warnings
    "ActivityCancelledError",
    "ActivityError",
    "ActivityNotRegisteredError",
    "ActivityReconciliationError",
    "ActivityTimeoutError",
    "ActivityTokenNotFoundError",
    "ApplicationError",
    "AuthenticationError",
    "ChildWorkflowError",
    "ConfigurationError",
    "CorruptRecordError",
    "DefinitionError",
    "EngineClosedError",
    "EngineDeposedError",
    "HistoryLimitError",
    "IdempotencyKeySpentError",
    "BulkOperationConfirmationError",
    "BulkDeleteRequiresTerminalWorkflowsError",
    "BulkScopeError",
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
    "InvalidScheduleError",
    "ScheduleAlreadyExistsError",
    "ScheduleNotFoundError",
    "StateConflictError",
    "WorkflowAlreadyExistsError",
    "WorkflowCancelledError",
    "WorkflowFailedError",
    "WorkflowNotFoundError",
    "WorkflowNotRegisteredError",
    "WorkflowTerminalError",
    "WorkflowTimeoutError",
    "WorkflowUsageError",
    "__version__",
]
