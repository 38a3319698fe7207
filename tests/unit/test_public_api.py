"""The public surface is deliberate: pinned names and documented errors."""

from __future__ import annotations

import inspect
from pathlib import Path

import pyweft
from pyweft import errors

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference" / "errors.md"

EXPECTED = {
    "RetryPolicy", "WorkflowContext", "activity", "workflow", "Engine", "WorkflowHandle",
    "ErrorInfo", "Page", "RunInfo", "StepInfo", "WorkflowInfo", "Clock", "DefaultPayloadCodec",
    "BulkPreview", "BulkResult",
    "MemoryStorage", "PayloadCodec", "SQLiteStorage", "Storage", "SystemClock", "VirtualClock",
    "open_storage", "__version__", "Escalation", "History", "HistoryEvent", "ReviewDecision",
    "ReviewInfo", "UpdateRequestHandle", "WorkflowEvent", "Saga", "Group", "LeaseHealth",
    "StoreOwnership", "EngineStats", "parse_duration", "format_duration",
    "LeaseLostWarning", "SecondInstanceWarning", "RunTornDown",
    "ActivityContext", "activity_context", "PendingActivity",
    "VerifyResult",
    "ScheduleInfo", "ScheduleOrigin",
    "MissedWindow",
    "Worker", "WorkerInfo", "ActivityQueueInfo",
    "Queue", "QueueInfo",
    "CodeDrift", "DriftCall", "MessageHandlers", "HandlerInfo",
}  # fmt: skip


def error_classes() -> list[type[errors.PyweftError]]:
    return [
        obj
        for _, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, errors.PyweftError)
    ]


def test_public_names_are_pinned() -> None:
    error_names = {cls.__name__ for cls in error_classes()}
    assert set(pyweft.__all__) == EXPECTED | error_names
    for name in pyweft.__all__:
        assert hasattr(pyweft, name), name


def test_every_error_has_a_stable_code_equal_to_its_class_name() -> None:
    for cls in error_classes():
        assert cls.code == cls.__name__


def test_every_error_is_documented() -> None:
    text = DOCS.read_text()
    for cls in error_classes():
        assert f"| `{cls.__name__}` |" in text, f"{cls.__name__} missing from {DOCS}"
