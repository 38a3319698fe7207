"""``@workflow``, ``@activity`` and ``RetryPolicy``: how user code declares durable work.

The decorators return the user's own function unchanged (so editors and type
checkers keep its signature) and attach a definition record to it. The engine
reads that record when the function is registered or passed to ``start`` /
``ctx.run``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import math
import re
import typing
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar, cast, overload

from pyweft.codec import call_types
from pyweft.durations import parse_duration, parse_optional_duration
from pyweft.errors import (
    DefinitionError,
    InvalidArgumentError,
    InvalidDurationError,
    InvalidScheduleError,
)

F = TypeVar("F", bound=Callable[..., Any])
# A workflow is an ``async def``: a type checker flags ``@workflow`` on a plain ``def``
# as the decorator does at run time.
WF = TypeVar("WF", bound=Callable[..., Awaitable[Any]])

Duration = float | int | timedelta | str

_WORKFLOW_ATTR = "__pyweft_workflow__"
_ACTIVITY_ATTR = "__pyweft_activity__"


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How a failed activity attempt is retried.

    Intervals accept seconds, ``timedelta`` or strings such as ``"30s"``; they
    are stored as float seconds. The wait before attempt ``n + 1`` is
    ``min(initial_interval * backoff ** (n - 1), max_interval)``.
    ``max_attempts=None`` retries until it succeeds (bounded only by the
    activity's ``schedule_to_close``). An error fails at once when its type is
    (a subclass of) a class in ``non_retryable`` or has a name listed there (the
    class name, or ``module.QualName``, of the type or any base), when it is an
    ``ApplicationError(non_retryable=True)``, or when ``should_retry(error,
    attempt)`` returns false.
    """

    max_attempts: int | None = 3
    initial_interval: float = 1.0
    backoff: float = 2.0
    max_interval: float = 60.0
    non_retryable: tuple[type[BaseException], ...] = ()
    non_retryable_names: frozenset[str] = frozenset()
    should_retry: Callable[[BaseException, int], bool] | None = None

    def __init__(
        self,
        *,
        max_attempts: int | None = 3,
        initial_interval: Duration = 1.0,
        backoff: float = 2.0,
        max_interval: Duration = 60.0,
        non_retryable: Iterable[type[BaseException] | str] = (),
        should_retry: Callable[[BaseException, int], bool] | None = None,
    ) -> None:
        if max_attempts is not None and (type(max_attempts) is not int or max_attempts < 1):
            raise DefinitionError(
                f"RetryPolicy.max_attempts must be an int >= 1, or None to retry until it "
                f"succeeds, got {max_attempts!r}"
            )
        if should_retry is not None and not callable(should_retry):
            raise DefinitionError(
                f"RetryPolicy.should_retry must be a function (error, attempt) -> bool, got "
                f"{should_retry!r}"
            )
        if (
            not isinstance(backoff, int | float)
            or isinstance(backoff, bool)
            or not 1.0 <= backoff < math.inf  # NaN fails both comparisons
        ):
            raise DefinitionError(
                f"RetryPolicy.backoff must be a finite number >= 1.0 (1.0 waits the same "
                f"initial_interval every time), got {backoff!r}"
            )
        types: list[type[BaseException]] = []
        names: set[str] = set()
        for t in non_retryable:
            if isinstance(t, str) and t:
                names.add(t)
            elif isinstance(t, type) and issubclass(t, BaseException):
                types.append(t)
            else:
                raise DefinitionError(
                    f"RetryPolicy.non_retryable must hold exception classes or their names "
                    f"(like 'PaymentDeclined'), got {t!r}"
                )
        set_ = object.__setattr__
        set_(self, "max_attempts", max_attempts)
        set_(self, "initial_interval", parse_duration(initial_interval, field="initial_interval"))
        set_(self, "backoff", float(backoff))
        set_(self, "max_interval", parse_duration(max_interval, field="max_interval"))
        set_(self, "non_retryable", tuple(types))
        set_(self, "non_retryable_names", frozenset(names))
        set_(self, "should_retry", should_retry)

    def delay_after(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        try:
            delay = self.initial_interval * self.backoff ** (attempt - 1)
        except OverflowError:  # a large backoff to a high power is past any cap
            return self.max_interval
        return float(min(delay, self.max_interval))

    def is_retryable(self, exc: BaseException) -> bool:
        """False when ``exc`` is non-retryable by type, name or its own marker."""
        if isinstance(exc, self.non_retryable) or getattr(exc, "non_retryable", False) is True:
            return False
        if self.non_retryable_names:
            for cls in type(exc).__mro__:
                if (
                    cls.__name__ in self.non_retryable_names
                    or f"{cls.__module__}.{cls.__qualname__}" in self.non_retryable_names
                ):
                    return False
            declared = getattr(exc, "type", None)  # ApplicationError(type="PaymentDeclined")
            if isinstance(declared, str) and declared in self.non_retryable_names:
                return False
        return True

    def allows_retry(self, exc: BaseException, attempt: int) -> bool:
        """Whether failed attempt number ``attempt`` (1-based) may be followed by another."""
        if self.max_attempts is not None and attempt >= self.max_attempts:
            return False
        if not self.is_retryable(exc):
            return False
        return self.should_retry is None or bool(self.should_retry(exc, attempt))


DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True, kw_only=True, slots=True)
class ActivityDefinition:
    """A registered activity: its function plus default execution options."""

    name: str
    fn: Callable[..., Any]
    is_async: bool
    retry: RetryPolicy
    timeout_s: float | None
    schedule_to_close_s: float | None
    result_type: object
    heartbeat_timeout_s: float | None = None  # an attempt silent this long fails
    heartbeat_throttle_s: float | None = None  # None: derived from heartbeat_timeout_s
    cancel_grace_s: float = 10.0  # how long a cancelled `def` activity may take to return
    # Keyed reconciliation (see pyweft.engine.steps.reconcile): key from the arguments,
    # and verify(key, *args) -> VerifyResult asked when a dispatch's outcome is unknown.
    idempotency_key: Callable[..., str] | None = None
    verify: Callable[..., Any] | None = None
    # The task queue that serves it (None: "default") and, when a worker runs it, how long
    # a claim lasts without the worker's heartbeat (None: 30s).
    queue: str | None = None
    visibility_timeout_s: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkflowDefinition:
    """A registered workflow: function, name, version and its own activities."""

    name: str
    fn: Callable[..., Any]
    version: str
    activities: dict[str, ActivityDefinition] = field(default_factory=dict)
    param_types: tuple[object, ...] = ()
    result_type: object = Any
    retention: dict[str, float] | None = None  # seconds per terminal status
    signature: inspect.Signature | None = None
    # (least, most) positional arguments ``signature`` binds, the context included (most
    # None: no limit); None when a count alone cannot tell. Spares a bind per start.
    arity: tuple[int, int | None] | None = None
    max_history_steps: int | None = None  # None: the engine's limit
    schedule: str | None = None  # a cron expression: the engine keeps a schedule for it
    timezone: str = "UTC"  # the zone ``schedule`` is read in

    def check_arguments(self, args: tuple[Any, ...]) -> None:
        """Refuse ``args`` that the workflow function could not be called with.

        Checked before a run is stored: a run whose arguments cannot bind would
        fail at once and use up its id for nothing.
        """
        if self.signature is None:
            return
        if self.arity is not None:
            least, most = self.arity
            if least <= len(args) + 1 and (most is None or len(args) + 1 <= most):
                return  # binds, as Signature.bind would say; it words the refusal below
        try:
            self.signature.bind(None, *args)  # None stands for the context
        except TypeError as exc:
            params = list(self.signature.parameters.values())[1:]
            takes = self.signature.replace(
                parameters=params, return_annotation=self.signature.empty
            )
            raise InvalidArgumentError(
                f"workflow {self.name!r} cannot be started with {len(args)} argument(s): {exc}. "
                f"After the context it takes {takes}; pass them positionally after the "
                "workflow, as in engine.start(wf, *args, id=...)"
            ) from None


def _activity_definition(
    fn: Callable[..., Any],
    *,
    name: str | None,
    retry: RetryPolicy | None,
    timeout: Duration | None,
    schedule_to_close: Duration | None,
    heartbeat_timeout: Duration | None = None,
    heartbeat_throttle: Duration | None = None,
    cancel_grace: Duration | None = None,
    idempotency_key: Callable[..., str] | None = None,
    verify: Callable[..., Any] | None = None,
    queue: str | None = None,
    visibility_timeout: Duration | None = None,
) -> ActivityDefinition:
    if not callable(fn):
        raise DefinitionError(f"@activity must decorate a function, got {fn!r}")
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise DefinitionError(
            f"@activity {fn.__qualname__} is a generator; activities must return a value"
        )
    if workflow_definition_of(fn) is not None:
        raise DefinitionError(
            f"{_qualname(fn)} is a @workflow, not an activity; start it with engine.start or "
            "ctx.start_child, or remove @workflow to run it as an activity"
        )
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise DefinitionError(f"@activity retry must be a RetryPolicy, got {retry!r}")
    for what, given in (("idempotency_key", idempotency_key), ("verify", verify)):
        if given is not None and not callable(given):
            raise DefinitionError(
                f"@activity {what} must be a function of the activity's arguments, got {given!r}"
            )
    if queue is not None and not _is_queue_name(queue):
        raise DefinitionError(
            f"@activity queue must be a name of 1 to 64 letters, digits, '_' or '-', got {queue!r}"
        )
    _, result_type, _ = call_types(fn, skip_first=False)
    return ActivityDefinition(
        name=_check_name(name or fn.__name__, "activity"),
        fn=fn,
        is_async=inspect.iscoroutinefunction(fn),
        retry=retry if retry is not None else DEFAULT_RETRY,
        timeout_s=parse_activity_timeout(timeout, field="timeout"),
        schedule_to_close_s=parse_activity_timeout(schedule_to_close, field="schedule_to_close"),
        result_type=result_type,
        heartbeat_timeout_s=parse_activity_timeout(heartbeat_timeout, field="heartbeat_timeout"),
        heartbeat_throttle_s=parse_activity_timeout(heartbeat_throttle, field="heartbeat_throttle"),
        cancel_grace_s=10.0
        if cancel_grace is None
        else parse_duration(cancel_grace, field="cancel_grace"),
        idempotency_key=idempotency_key,
        verify=verify,
        queue=queue,
        visibility_timeout_s=parse_activity_timeout(visibility_timeout, field="visibility_timeout"),
    )


def _is_queue_name(name: object) -> bool:
    return isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) is not None


def parse_activity_timeout(value: Duration | None, *, field: str) -> float | None:
    """An activity's ``timeout`` or ``schedule_to_close``: more than zero, or ``None``.

    Zero would fail every attempt before it starts, so it is refused here
    instead of surfacing later as a spent budget.
    """
    seconds = parse_optional_duration(value, field=field)
    if seconds == 0.0:
        what = {
            "timeout": "each attempt",
            "schedule_to_close": "all attempts together, backoff included",
            "heartbeat_timeout": "the silence allowed between two heartbeats",
            "heartbeat_throttle": "how often heartbeat details are written",
        }.get(field, field)
        raise InvalidDurationError(
            f"Invalid {field}: 0 would fail the activity before it starts; {field} bounds "
            f"{what}, so give it more than 0 seconds, or None for no limit"
        )
    return seconds


def _qualname(fn: object) -> str:
    return str(getattr(fn, "__qualname__", None) or repr(fn))


def _check_name(name: str, what: str) -> str:
    from pyweft.engine.replay.keys import check_text  # keys imports nothing of ours; no cycle

    try:
        return check_text(name, f"{what} name", 200)
    except InvalidArgumentError as exc:
        raise DefinitionError(str(exc)) from None


@overload
def activity(fn: F, /) -> F: ...
@overload
def activity(
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: Duration | None = None,
    schedule_to_close: Duration | None = None,
    heartbeat_timeout: Duration | None = None,
    heartbeat_throttle: Duration | None = None,
    cancel_grace: Duration | None = None,
    idempotency_key: Callable[..., str] | None = None,
    verify: Callable[..., Any] | None = None,
    queue: str | None = None,
    visibility_timeout: Duration | None = None,
) -> Callable[[F], F]: ...
def activity(
    fn: F | None = None,
    /,
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: Duration | None = None,
    schedule_to_close: Duration | None = None,
    heartbeat_timeout: Duration | None = None,
    heartbeat_throttle: Duration | None = None,
    cancel_grace: Duration | None = None,
    idempotency_key: Callable[..., str] | None = None,
    verify: Callable[..., Any] | None = None,
    queue: str | None = None,
    visibility_timeout: Duration | None = None,
) -> F | Callable[[F], F]:
    """Declare an activity: a unit of side-effecting work whose result is recorded.

    ``async def`` activities run on the event loop; plain ``def`` activities run
    in the engine's activity thread pool. ``timeout`` bounds each attempt,
    ``schedule_to_close`` bounds all attempts together (backoff included).
    ``heartbeat_timeout`` fails an attempt that goes that long without calling
    ``activity_context().heartbeat()``; ``heartbeat_throttle`` is the most often its
    details are written to the store (default: 0.8 of ``heartbeat_timeout``, else 30s).
    ``cancel_grace`` (default 10s) is how long a cancelled plain ``def`` activity is
    given to notice ``activity_context().cancelled`` and return.
    ``idempotency_key`` (a function of the arguments returning a string) makes the
    activity keyed: a dispatch whose outcome a crash hid is reconciled with
    ``verify(key, *args)`` (returning a ``VerifyResult``) instead of being run
    again; without ``verify`` such a step fails closed.
    ``queue`` names the task queue that serves it (default ``"default"``): an engine
    whose ``serve_queues`` leaves it out hands its attempts to worker processes
    (``pyweft.Worker``); ``visibility_timeout`` (default 30s) is how long a worker's
    claim on an attempt lasts without the worker's heartbeat.
    """

    def decorate(f: F) -> F:
        if workflow_definition_of(f) is not None:
            raise DefinitionError(
                f"@activity on {_qualname(f)}, which is already a @workflow: a function is "
                "one or the other; start workflows with engine.start or ctx.start_child"
            )
        definition = _activity_definition(
            f,
            name=name,
            retry=retry,
            timeout=timeout,
            schedule_to_close=schedule_to_close,
            heartbeat_timeout=heartbeat_timeout,
            heartbeat_throttle=heartbeat_throttle,
            cancel_grace=cancel_grace,
            idempotency_key=idempotency_key,
            verify=verify,
            queue=queue,
            visibility_timeout=visibility_timeout,
        )
        if inspect.ismethod(f):
            # A bound method takes no attributes: wrap it, keeping its object.
            return cast(F, _bound_activity(f, definition))
        setattr(f, _ACTIVITY_ATTR, definition)
        return f

    return decorate(fn) if fn is not None else decorate


def _bound_activity(method: Callable[..., Any], definition: ActivityDefinition) -> Any:
    if definition.is_async:

        async def call_async(*args: Any, **kwargs: Any) -> Any:
            return await method(*args, **kwargs)

        wrapper: Callable[..., Any] = call_async
    else:

        def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        wrapper = call
    functools.update_wrapper(wrapper, method)
    setattr(wrapper, _ACTIVITY_ATTR, definition)
    return wrapper


@overload
def workflow(fn: WF, /) -> WF: ...
@overload
def workflow(
    *,
    name: str | None = None,
    version: str = "1",
    activities: Iterable[Callable[..., Any]] = (),
    retention: Mapping[str, Duration] | None = None,
    max_history_steps: int | None = None,
    schedule: str | None = None,
    timezone: str = "UTC",
) -> Callable[[WF], WF]: ...
def workflow(
    fn: WF | None = None,
    /,
    *,
    name: str | None = None,
    version: str = "1",
    activities: Iterable[Callable[..., Any]] = (),
    retention: Mapping[str, Duration] | None = None,
    max_history_steps: int | None = None,
    schedule: str | None = None,
    timezone: str = "UTC",
) -> WF | Callable[[WF], WF]:
    """Declare a workflow: ``async def wf(ctx, *args)`` whose durable steps survive crashes.

    ``activities`` are looked up before the engine-wide registry when the
    workflow calls an activity by name. ``retention`` (per terminal status,
    e.g. ``{"completed": "7d"}``) overrides the engine's retention for this
    workflow's runs. ``max_history_steps`` overrides the engine's limit on steps per run
    (a loop that never ends fails with ``HistoryLimitError`` past it).
    ``schedule`` (a cron expression read in ``timezone``) runs the workflow, with no
    arguments, at every occurrence: an engine registering it keeps a schedule whose id
    is the workflow's name, created, updated or removed to match the code when it opens.
    """
    own = tuple(activities)
    cron, zone = _check_schedule(schedule, timezone)
    if max_history_steps is not None and (
        type(max_history_steps) is not int or max_history_steps < 1
    ):
        raise DefinitionError(
            f"@workflow max_history_steps must be a positive int, got {max_history_steps!r}"
        )
    kept = parse_retention(retention) if retention is not None else None

    def decorate(f: WF) -> WF:
        if is_activity(f):
            raise DefinitionError(
                f"@workflow on {_qualname(f)}, which is already an @activity: a function is "
                "one or the other; register activities with Engine(activities=[...]) and call "
                "them with ctx.run"
            )
        is_async = inspect.iscoroutinefunction(f)  # not in the `if`: it would narrow away WF
        if not is_async:
            raise DefinitionError(
                f"@workflow {getattr(f, '__qualname__', f)!r} must be an `async def` function "
                "taking the WorkflowContext as its first parameter"
            )
        params = list(inspect.signature(f).parameters.values())
        if not params or params[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            raise DefinitionError(
                f"@workflow {f.__qualname__} must take the WorkflowContext as its first parameter"
            )
        _check_context_parameter(f, params[0])
        required_kw = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
        if required_kw:
            raise DefinitionError(
                f"@workflow {f.__qualname__} has required keyword-only parameter(s) "
                f"{', '.join(required_kw)}, but workflow arguments are passed positionally; "
                "make them positional or give them defaults"
            )
        if not isinstance(version, str) or not version:
            raise DefinitionError(f"@workflow version must be a non-empty string, got {version!r}")
        acts: dict[str, ActivityDefinition] = {}
        for a in own:
            d = activity_definition_of(a)
            acts[d.name] = d
        param_types, result_type, _ = call_types(f, skip_first=True)
        signature = _signature(f)
        definition = WorkflowDefinition(
            name=_check_name(name or f.__name__, "workflow"),
            fn=f,
            version=version,
            activities=acts,
            param_types=param_types,
            result_type=result_type,
            retention=kept,
            signature=signature,
            arity=positional_arity(signature),
            max_history_steps=max_history_steps,
            schedule=cron,
            timezone=zone,
        )
        setattr(f, _WORKFLOW_ATTR, definition)
        return f

    return decorate(fn) if fn is not None else decorate


RETENTION_STATUSES = ("completed", "failed", "cancelled", "timed_out")


def _check_schedule(schedule: object, timezone: object) -> tuple[str | None, str]:
    from pyweft.engine.schedules.spec import check_cron, check_timezone

    try:
        zone = check_timezone(timezone)
        return (None if schedule is None else check_cron(schedule)), zone
    except InvalidScheduleError as exc:
        raise DefinitionError(f"@workflow schedule: {exc}") from exc


def _signature(f: Callable[..., Any]) -> inspect.Signature:
    """``f``'s signature with string annotations resolved where they can be (for messages)."""
    try:
        return inspect.signature(f, eval_str=True)
    except Exception:
        return inspect.signature(f)


def positional_arity(signature: inspect.Signature) -> tuple[int, int | None] | None:
    """How many positional arguments ``signature`` binds: ``(least, most)``, ``most``
    None with ``*args``; None when a keyword-only parameter without a default makes
    every positional call fail (a count cannot say so)."""
    least = most = 0
    unbounded = False
    for param in signature.parameters.values():
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            most += 1
            if param.default is param.empty:
                least = most  # required ones come before any with a default
        elif param.kind is param.VAR_POSITIONAL:
            unbounded = True
        elif param.kind is param.KEYWORD_ONLY and param.default is param.empty:
            return None
    return least, None if unbounded else most


def _check_context_parameter(f: Callable[..., Any], first: inspect.Parameter) -> None:
    """Refuse a first parameter annotated as something other than the context.

    ``async def wf(order: dict)`` has forgotten ``ctx``: it would be called
    with the context as ``order`` and fail in every run. Unannotated and
    unresolvable hints are let through.
    """
    if first.annotation is inspect.Parameter.empty:
        return
    try:
        hint = typing.get_type_hints(f).get(first.name, Any)
    except Exception:
        return
    origin = typing.get_origin(hint) or hint
    if (
        isinstance(origin, type)
        and hint is not Any
        and origin is not object  # WorkflowContext's only base
        and not _is_workflow_context(origin)
        and not getattr(origin, "_is_protocol", False)
    ):
        raise DefinitionError(
            f"@workflow {f.__qualname__}: its first parameter {first.name!r} is annotated "
            f"{getattr(hint, '__name__', hint)!s}, but a workflow's first parameter receives "
            f"the WorkflowContext; write `async def {f.__name__}(ctx: WorkflowContext, "
            f"{first.name}: ...)`"
        )


def _is_workflow_context(cls: type) -> bool:
    """``cls`` is WorkflowContext or a subclass (by name: the engine imports this module,
    so importing the engine's context here would make an import cycle)."""
    return any(
        c.__name__ == "WorkflowContext" and c.__module__ == "pyweft.engine.context"
        for c in cls.__mro__
    )


def parse_retention(value: Mapping[str, Duration]) -> dict[str, float]:
    """``{"completed": "7d", ...}`` as seconds, with the statuses checked."""
    if not isinstance(value, Mapping):
        raise DefinitionError("retention must be a dict like {'completed': '7d'}")
    out: dict[str, float] = {}
    for status, duration in value.items():
        if status not in RETENTION_STATUSES:
            raise DefinitionError(
                f"retention key {status!r} is not a terminal status; use "
                f"{', '.join(RETENTION_STATUSES)}"
            )
        out[status] = parse_duration(duration, field=f"retention[{status!r}]")
    return out


def is_activity(obj: object) -> bool:
    """True when ``obj`` was decorated with ``@activity``."""
    return isinstance(getattr(obj, _ACTIVITY_ATTR, None), ActivityDefinition)


def refuse_activity_as_workflow(obj: object, call: str) -> None:
    """A clear error for ``engine.start(an_activity)`` and the like, before any lookup."""
    if is_activity(obj):
        raise DefinitionError(
            f"{call} got {_qualname(obj)}, which is an @activity, not a workflow; run it from "
            "a workflow with ctx.run, or declare a @workflow that does"
        )


def workflow_definition_of(obj: object) -> WorkflowDefinition | None:
    """The definition attached by ``@workflow``, or ``None``."""
    d = getattr(obj, _WORKFLOW_ATTR, None)
    return d if isinstance(d, WorkflowDefinition) else None


_plain: weakref.WeakKeyDictionary[Callable[..., Any], ActivityDefinition] = (
    weakref.WeakKeyDictionary()
)


def activity_definition_of(fn: Callable[..., Any]) -> ActivityDefinition:
    """The definition attached by ``@activity``; undecorated functions get defaults.

    Definitions of undecorated functions are cached (weakly) because building
    one inspects type hints, which is far too slow for every ``ctx.run``.
    """
    d = getattr(fn, _ACTIVITY_ATTR, None)
    if isinstance(d, ActivityDefinition):
        if inspect.ismethod(fn) and d.fn is fn.__func__:
            # ``@activity`` on a method in a class, used through an object (``acts.do``):
            # call it bound to that object, not as the bare function without ``self``.
            return dataclasses.replace(d, fn=fn)
        return d
    try:
        cached = _plain.get(fn)
    except TypeError:  # not weak-referenceable (e.g. some builtins)
        cached = None
    if cached is None:
        cached = _activity_definition(
            fn, name=None, retry=None, timeout=None, schedule_to_close=None
        )
        with contextlib.suppress(TypeError):
            _plain[fn] = cached
    return cached
