"""OpenTelemetry tracing: :class:`TracingInterceptor` (extra ``pyweft[otel]``).

Spans: ``start <type>`` where a run (or a child) is started; ``run <type>`` for each
execution of the workflow function in a process; ``activity <name>`` for each attempt;
``sleep``, ``signal <name>``, ``update <name>``, ``child <type>``, ``review <type>``,
``memo <key>`` and ``race`` for live ``ctx`` operations (replayed ones make no span);
``query <name>`` and ``update <name>`` for handlers. The W3C trace context of the start
span travels in the run's headers (``traceparent``/``tracestate``), so the run's spans
join the caller's trace in any process, and a run resumed after a crash continues the
same trace: its new ``run`` span has the start span as parent *and* a link to it, with
``pyweft.resumed`` set. On a :class:`~pyweft.Worker` (``Worker(interceptors=[...])``) the
``activity <name>`` span of an attempt it runs has that start span as parent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

try:
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind, TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    from pyweft.errors import ConfigurationError

    raise ConfigurationError(
        "pyweft.observability.otel needs OpenTelemetry: pip install 'pyweft[otel]'"
    ) from exc

from pyweft.observability.interceptors import (
    ActivityInput,
    Interceptor,
    OperationInput,
    QueryInput,
    StartInput,
    UpdateInput,
    WorkflowInput,
)

_PROPAGATOR = TraceContextTextMapPropagator()
_OPERATION_SPANS = {
    "sleep": "sleep",
    "signal": "signal",
    "update": "update",
    "child": "child",
    "review": "review",
    "memo": "memo",
    "race": "race",
}


class TracingInterceptor(Interceptor):
    """Spans for runs, activity attempts, timers, messages and children.

    ``tracer_provider`` defaults to the global one. Ids are span attributes
    (``pyweft.workflow_id``), never metric labels.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("pyweft", tracer_provider=tracer_provider)

    async def start(self, input: StartInput, next: Callable[[StartInput], Awaitable[str]]) -> str:
        attributes = {"pyweft.workflow_type": input.workflow_type}
        if input.parent_id is not None:
            attributes["pyweft.parent_id"] = input.parent_id
        # A caller in another process (an HTTP client) may send its trace context in the
        # headers: the start span joins that trace. Otherwise (and for a child, whose
        # headers are its parent's), the current context: the caller's, or the child span.
        given = None
        if input.parent_id is None and "traceparent" in input.headers:
            given = _PROPAGATOR.extract(input.headers)
        with self._tracer.start_as_current_span(
            f"start {input.workflow_type}",
            context=given,
            kind=SpanKind.PRODUCER,
            attributes=attributes,
        ) as span:
            carrier: dict[str, str] = {}
            _PROPAGATOR.inject(carrier)
            input.headers.update(carrier)  # the run's spans join this trace, anywhere
            workflow_id = await next(input)
            span.set_attribute("pyweft.workflow_id", workflow_id)
            return workflow_id

    async def execute_workflow(
        self, input: WorkflowInput, next: Callable[[WorkflowInput], Awaitable[Any]]
    ) -> Any:
        parent = _PROPAGATOR.extract(dict(input.headers))
        links = []
        if input.resumed:  # a later life of the run: say so, and point at where it began
            origin = trace.get_current_span(parent).get_span_context()
            if origin.is_valid:
                links.append(Link(origin, {"pyweft.link": "run started here"}))
        with self._tracer.start_as_current_span(
            f"run {input.workflow_type}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                "pyweft.workflow_id": input.workflow_id,
                "pyweft.workflow_type": input.workflow_type,
                "pyweft.generation": input.generation,
                "pyweft.resumed": input.resumed,
            },
        ):
            return await next(input)

    async def operation(
        self, input: OperationInput, next: Callable[[OperationInput], Awaitable[Any]]
    ) -> Any:
        prefix = _OPERATION_SPANS.get(input.kind)
        if prefix is None or input.replaying:  # activities: one span per attempt instead
            return await next(input)
        name = f"{prefix} {input.name}" if input.name else prefix
        with self._tracer.start_as_current_span(
            name, attributes={"pyweft.step": input.step, "pyweft.workflow_id": input.workflow_id}
        ):
            return await next(input)

    async def execute_activity(
        self, input: ActivityInput, next: Callable[[ActivityInput], Awaitable[Any]]
    ) -> Any:
        # In the engine the run's span is current. On a worker process nothing is: the
        # trace context in the run's headers (the start span) parents the attempt's span.
        parent = None
        if not trace.get_current_span().get_span_context().is_valid:
            parent = _PROPAGATOR.extract(dict(input.headers))
        with self._tracer.start_as_current_span(
            f"activity {input.activity}",
            context=parent,
            kind=SpanKind.CONSUMER if parent is not None else SpanKind.INTERNAL,
            attributes={
                "pyweft.workflow_id": input.workflow_id,
                "pyweft.activity": input.activity,
                "pyweft.step": input.step,
                "pyweft.attempt": input.attempt,
            },
        ):
            return await next(input)

    def handle_query(self, input: QueryInput, next: Callable[[QueryInput], Any]) -> Any:
        with self._tracer.start_as_current_span(
            f"query {input.name}", attributes={"pyweft.workflow_id": input.workflow_id}
        ):
            return next(input)

    def handle_update(self, input: UpdateInput, next: Callable[[UpdateInput], Any]) -> Any:
        if input.replaying:
            return next(input)
        with self._tracer.start_as_current_span(
            f"update {input.name}", attributes={"pyweft.workflow_id": input.workflow_id}
        ):
            return next(input)


def inject_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    """The current trace context as headers (``traceparent``...), added to ``headers``:
    for a caller that passes ``headers=`` itself (e.g. to a pyweft server)."""
    carrier = {} if headers is None else headers
    _PROPAGATOR.inject(carrier)
    return carrier
