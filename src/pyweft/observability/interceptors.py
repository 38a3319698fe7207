"""Interceptors: code that wraps what the engine does, on both sides of a run.

One :class:`Interceptor` class covers every hook; override the ones you need and
leave the rest (a hook that is not overridden costs nothing: the chain skips it).
Each hook takes one frozen input dataclass, so fields can be added later without
breaking anyone's interceptor, and a ``next`` callable that runs the rest of the
chain (and finally the engine itself).

Order: the first interceptor given to ``Engine(interceptors=[a, b])`` is the
outermost, so ``a`` sees a call before ``b`` and sees its outcome after ``b``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyweft.observability.headers import Headers


@dataclass(frozen=True, kw_only=True, slots=True)
class StartInput:
    """``engine.start``, or ``ctx.start_child`` (``parent_id`` set; the child's id is
    known and ``next`` returns it). ``headers`` may be changed in place: they are the
    new run's headers (a child's start as a copy of its parent's)."""

    workflow_type: str
    args: tuple[Any, ...]
    workflow_id: str | None
    headers: dict[str, str]
    parent_id: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkflowInput:
    """One execution of the workflow function in this process: its first, or a replay
    after a restart or an eviction (``resumed``: some of its steps were recorded or open)."""

    workflow_id: str
    workflow_type: str
    args: tuple[Any, ...]
    headers: Headers
    generation: int
    resumed: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class OperationInput:
    """A durable ``ctx`` operation. ``kind`` is one of ``activity``, ``sleep``,
    ``signal``, ``update``, ``condition``, ``review``, ``child``, ``memo``, ``race``;
    ``replaying`` is true when its outcome comes from the journal."""

    workflow_id: str
    workflow_type: str
    kind: str
    name: str
    step: int
    replaying: bool
    headers: Headers


@dataclass(frozen=True, kw_only=True, slots=True)
class QueryInput:
    workflow_id: str
    workflow_type: str
    name: str
    args: tuple[Any, ...]
    headers: Headers


@dataclass(frozen=True, kw_only=True, slots=True)
class UpdateInput:
    """An update handler call; ``replaying`` when it rebuilds state from the journal."""

    workflow_id: str
    workflow_type: str
    name: str
    args: tuple[Any, ...]
    replaying: bool
    headers: Headers


@dataclass(frozen=True, kw_only=True, slots=True)
class CompletionInput:
    """A run reached ``status`` (terminal, or ``blocked``) and that is stored.

    ``failure_category`` is set for ``failed``, ``timed_out``, ``cancelled`` and
    ``blocked`` (see ``docs/guides/observability.md``)."""

    workflow_id: str
    workflow_type: str
    status: str
    error_type: str | None
    error_message: str | None
    failure_category: str | None
    duration_s: float
    headers: Headers


@dataclass(frozen=True, kw_only=True, slots=True)
class ActivityInput:
    """One attempt of an activity. ``args`` may be replaced by passing a changed copy
    (``dataclasses.replace(input, args=...)``) to ``next``."""

    workflow_id: str
    workflow_type: str
    activity: str
    step: int
    attempt: int
    args: tuple[Any, ...]
    headers: Headers


class Interceptor:
    """Base class: every hook passes straight through. Override what you need."""

    async def start(self, input: StartInput, next: Callable[[StartInput], Awaitable[str]]) -> str:
        """Around ``engine.start`` (in the caller's context: read contextvars here)."""
        return await next(input)

    async def execute_workflow(
        self, input: WorkflowInput, next: Callable[[WorkflowInput], Awaitable[Any]]
    ) -> Any:
        """Around one execution of the workflow function (in the run's own task)."""
        return await next(input)

    async def operation(
        self, input: OperationInput, next: Callable[[OperationInput], Awaitable[Any]]
    ) -> Any:
        """Around each durable ``ctx`` operation, from first await to its outcome."""
        return await next(input)

    def handle_query(self, input: QueryInput, next: Callable[[QueryInput], Any]) -> Any:
        """Around a query handler (plain function: it must not block)."""
        return next(input)

    def handle_update(self, input: UpdateInput, next: Callable[[UpdateInput], Any]) -> Any:
        """Around an update handler, live and on replay (``input.replaying``)."""
        return next(input)

    def workflow_completed(self, input: CompletionInput) -> None:
        """Told once a run's end (or block) is stored. Errors raised here are logged."""

    async def execute_activity(
        self, input: ActivityInput, next: Callable[[ActivityInput], Awaitable[Any]]
    ) -> Any:
        """Around each activity attempt (its retries are separate calls)."""
        return await next(input)


HOOKS: tuple[str, ...] = (
    "start",
    "execute_workflow",
    "operation",
    "handle_query",
    "handle_update",
    "workflow_completed",
    "execute_activity",
)


def overriding(interceptors: tuple[Interceptor, ...], hook: str) -> tuple[Interceptor, ...]:
    """The interceptors that define ``hook`` themselves, outermost first."""
    base = getattr(Interceptor, hook)
    return tuple(i for i in interceptors if getattr(type(i), hook, base) is not base)


def compose_async(
    chain: tuple[Interceptor, ...], hook: str, inner: Callable[[Any], Awaitable[Any]]
) -> Callable[[Any], Awaitable[Any]]:
    """``inner`` wrapped by ``hook`` of each interceptor, the first one outermost."""
    call = inner
    for icpt in reversed(chain):
        call = _bind(getattr(icpt, hook), call)
    return call


def compose_sync(
    chain: tuple[Interceptor, ...], hook: str, inner: Callable[[Any], Any]
) -> Callable[[Any], Any]:
    call = inner
    for icpt in reversed(chain):
        call = _bind(getattr(icpt, hook), call)
    return call


def _bind(method: Callable[[Any, Any], Any], nxt: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def call(input: Any) -> Any:
        return method(input, nxt)

    return call


def check_interceptors(value: object) -> tuple[Interceptor, ...]:
    """``Engine(interceptors=...)``: a list of :class:`Interceptor` instances."""
    from pyweft.errors import ConfigurationError

    if isinstance(value, Interceptor | str | bytes | Mapping):
        raise ConfigurationError(
            f"interceptors= must be a list of Interceptor instances, got {value!r}; "
            "wrap a single one in a list"
        )
    try:
        items: tuple[object, ...] = tuple(value)  # type: ignore[arg-type]
    except TypeError:
        raise ConfigurationError(
            f"interceptors= must be a list of Interceptor instances, got {value!r}"
        ) from None
    for index, item in enumerate(items):
        if not isinstance(item, Interceptor):
            hint = " (pass an instance, not the class)" if isinstance(item, type) else ""
            raise ConfigurationError(
                f"interceptors[{index}] is {item!r}, not a pyweft.Interceptor{hint}; "
                "subclass pyweft.Interceptor and override the hooks you need"
            )
    return items  # type: ignore[return-value]  # (each was checked above)
