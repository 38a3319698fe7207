"""See inside and extend the engine: interceptors, headers (context propagation),
OpenTelemetry (``pyweft.observability.otel``, extra ``pyweft[otel]``), metrics
(``pyweft.observability.metrics``), error trackers and logging
(``pyweft.observability.logs``). Guide: ``docs/guides/observability.md``."""

from __future__ import annotations

from pyweft.observability.headers import Headers, current_headers
from pyweft.observability.interceptors import (
    ActivityInput,
    CompletionInput,
    Interceptor,
    OperationInput,
    QueryInput,
    StartInput,
    UpdateInput,
    WorkflowInput,
)

__all__ = [
    "ActivityInput",
    "CompletionInput",
    "Headers",
    "Interceptor",
    "OperationInput",
    "QueryInput",
    "StartInput",
    "UpdateInput",
    "WorkflowInput",
    "current_headers",
]
