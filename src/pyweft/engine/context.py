"""``WorkflowContext``: the handle a workflow uses for every durable operation.

Each method that performs a durable step takes its step number when it is
*called* and returns an awaitable, so steps started concurrently (for example
with ``asyncio.gather``) get deterministic numbers in call order.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar, TypeVarTuple, overload

from pyweft.definitions import (
    ActivityDefinition,
    Duration,
    RetryPolicy,
    activity_definition_of,
    parse_activity_timeout,
    refuse_activity_as_workflow,
)
from pyweft.durations import parse_duration, parse_optional_duration, parse_timestamp
from pyweft.engine.composition import children, fanout
from pyweft.engine.composition.saga import Saga
from pyweft.engine.messages import conditions, handlers, outbound, reviews, signals, updates
from pyweft.engine.messages.handler_catalog import HANDLERS_QUERY
from pyweft.engine.messages.reviews import Escalation, ReviewDecision
from pyweft.engine.messages.updates import UpdateRequestHandle
from pyweft.engine.replay import keys, operations
from pyweft.engine.replay.handler_runs import CURRENT_HANDLER
from pyweft.engine.replay.info import RunInfo, to_datetime
from pyweft.engine.replay.run import Run
from pyweft.engine.replay.services import ContinueAsNew
from pyweft.engine.steps import activities, attributes, recorded, timers
from pyweft.engine.tasks.records import check_queue
from pyweft.errors import (
    ActivityNotRegisteredError,
    DefinitionError,
    InvalidArgumentError,
)
from pyweft.observability import chain
from pyweft.observability.headers import Headers, frozen

if TYPE_CHECKING:
    from pyweft.engine.messages.streams import StreamWriter
    from pyweft.engine.state.locks import Lock
    from pyweft.engine.state.steps import StateHandle

T = TypeVar("T")
# ``ctx.run(fn, *args)`` and ``ctx.start_child(wf, *args)`` check ``args`` against the
# function's parameters (after the context, for a workflow) and type the result as what
# it returns. A TypeVarTuple, not a ParamSpec: the options (``retry=``, ``id=``...)
# follow ``*args``, which type checkers refuse between ``P.args`` and ``P.kwargs``.
Ts = TypeVarTuple("Ts")


class _ReplayFilter(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A workflow logger that stays quiet while replaying recorded steps."""

    def __init__(self, logger: logging.Logger, run: Run) -> None:
        super().__init__(logger, {"workflow_id": run.id, "workflow_type": run.definition.name})
        self._run = run

    def isEnabledFor(self, level: int) -> bool:
        return not self._run.replaying and super().isEnabledFor(level)

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        # The step the workflow took last: where in the run this record was made.
        kwargs["extra"] = {**self.extra, "step": self._run.steps_taken, **kwargs.get("extra", {})}  # type: ignore[dict-item]
        return msg, kwargs


class WorkflowContext:
    """Passed as the first argument to every workflow function."""

    __slots__ = ("_base", "_log")

    def __init__(self, run: Run) -> None:
        self._base = run
        self._log: logging.LoggerAdapter[logging.Logger] | None = None

    @property
    def _run(self) -> Run:
        """The run, or inside an async update handler, the handler's view of it (its
        steps are numbered and replayed from the invocation's own journal)."""
        handler = CURRENT_HANDLER.get()
        if handler is not None and handler.base is self._base:
            return handler  # type: ignore[return-value]  # a view that acts as the run
        return self._base

    @property
    def workflow_id(self) -> str:
        return self._run.id

    @property
    def workflow_type(self) -> str:
        return self._run.definition.name

    @property
    def info(self) -> RunInfo:
        """This run's identity and origin (see :class:`RunInfo`); no I/O, no step."""
        state = self._run.state
        return RunInfo(
            workflow_id=state.id,
            workflow_type=state.type,
            version=state.version,
            created_at=to_datetime(state.created_at),
            generation=state.generation,
            generation_started_at=to_datetime(state.generation_started_at or state.created_at),
            parent_id=state.parent_id,
            depth=state.depth,
            tags=tuple(state.tags),
            execution_deadline=None if state.deadline is None else to_datetime(state.deadline),
            idempotency_key=state.idempotency_key,
            forked_from=state.forked_from,
            forked_at_step=state.forked_at_step,
            schedule_id=state.schedule_id,
            nominal_time=None if state.nominal_time is None else to_datetime(state.nominal_time),
        )

    @property
    def headers(self) -> Headers:
        """The run's headers (given at start, inherited by children): read-only."""
        return frozen(self._run.state.headers)

    @property
    def is_replaying(self) -> bool:
        """True while the run is re-executing steps that were already recorded."""
        return self._run.replaying

    @property
    def log(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger tagged with the workflow id that is silent during replay."""
        if self._log is None:
            self._log = _ReplayFilter(logging.getLogger("pyweft.workflow"), self._run)
        return self._log

    @overload
    def run(
        self,
        activity: Callable[[*Ts], Awaitable[T]],
        /,
        *args: *Ts,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        schedule_to_close: Duration | None = None,
        idempotency_key: str | None = None,
        queue: str | None = None,
    ) -> Awaitable[T]: ...
    @overload
    def run(
        self,
        activity: Callable[[*Ts], T],
        /,
        *args: *Ts,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        schedule_to_close: Duration | None = None,
        idempotency_key: str | None = None,
        queue: str | None = None,
    ) -> Awaitable[T]: ...
    @overload
    def run(
        self,
        activity: str,
        /,
        *args: Any,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        schedule_to_close: Duration | None = None,
        idempotency_key: str | None = None,
        queue: str | None = None,
    ) -> Awaitable[Any]: ...
    def run(
        self,
        activity: Callable[..., Any] | str,
        /,
        *args: object,
        retry: RetryPolicy | None = None,
        timeout: Duration | None = None,
        schedule_to_close: Duration | None = None,
        idempotency_key: str | None = None,
        queue: str | None = None,
    ) -> Awaitable[Any]:
        """Run an activity (a function or a registered name) as one durable step.

        Its result is committed before it is returned; on replay the recorded
        result is returned without running the activity again. Options given
        here override the activity's own for this call. Pass activity
        arguments positionally. ``idempotency_key`` keys this call (see
        ``@activity(idempotency_key=..., verify=...)``). ``queue`` sends this call to
        another task queue than the activity's own (see ``Engine(serve_queues=...)``).
        """
        act = self._resolve(activity)
        if idempotency_key is not None and (
            not isinstance(idempotency_key, str) or not idempotency_key
        ):
            raise InvalidArgumentError(
                f"ctx.run idempotency_key= must be a non-empty string, got {idempotency_key!r}"
            )
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError(f"ctx.run retry= must be a RetryPolicy, got {retry!r}")
        if queue is not None:
            check_queue(queue, field="ctx.run queue=")
        # Options are checked before the step number is taken, so a bad one takes none.
        timeout_s = (
            act.timeout_s if timeout is None else parse_activity_timeout(timeout, field="timeout")
        )
        budget_s = (
            act.schedule_to_close_s
            if schedule_to_close is None
            else parse_activity_timeout(schedule_to_close, field="schedule_to_close")
        )
        step = activities.run_activity(
            self._run,
            self._run.alloc_step(),
            act,
            args,
            retry if retry is not None else act.retry,
            timeout_s,
            budget_s,
            idempotency_key,
            queue,
        )
        return chain.operation(self._run, "activity", act.name, step)

    def _resolve(self, activity: Callable[..., Any] | str) -> ActivityDefinition:
        if isinstance(activity, str):
            act = self._run.definition.activities.get(
                activity
            ) or self._run.services.activities.get(activity)
            if act is None:
                known = sorted({*self._run.definition.activities, *self._run.services.activities})
                raise ActivityNotRegisteredError(
                    f"activity {activity!r} is not registered (workflow {self.workflow_type!r} "
                    f"knows: {', '.join(known) or 'none'}). Pass the function itself, list it in "
                    "@workflow(activities=[...]) or Engine(activities=[...]).",
                    activity_name=activity,
                )
            return act
        if not callable(activity):
            raise TypeError(f"ctx.run expects an activity function or name, got {activity!r}")
        return activity_definition_of(activity)

    def sleep(self, duration: Duration) -> Awaitable[None]:
        """Sleep durably: survives restarts and keeps its original deadline."""
        seconds = parse_duration(duration, field="sleep duration")
        return chain.operation(
            self._run,
            "sleep",
            "",
            timers.sleep_until(self._run, self._run.alloc_step(), None, seconds),
        )

    def sleep_until(self, when: datetime | float) -> Awaitable[None]:
        """Sleep durably until an absolute time (aware ``datetime`` or epoch seconds)."""
        deadline = parse_timestamp(when, field="sleep_until")
        return chain.operation(
            self._run,
            "sleep",
            "",
            timers.sleep_until(self._run, self._run.alloc_step(), deadline, 0.0),
        )

    # --- messages ---------------------------------------------------------------------

    def wait_for_signal(self, name: str, *, timeout: Duration | None = None) -> Awaitable[Any]:
        """Wait for the next ``name`` signal and return its payload (one durable step).

        Signals sent before the wait are buffered and consumed in arrival order.
        Raises :class:`~pyweft.WaitTimeoutError` when ``timeout`` passes first.
        """
        signals.check_name(name, "signal")
        seconds = parse_optional_duration(timeout, field="timeout")
        wait = signals.wait_for_signal(self._run, self._run.alloc_step(), name, seconds)
        return chain.operation(self._run, "signal", name, wait)

    def on_query(self, name: str, fn: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """Answer ``engine.query(id, name, *args)`` with ``fn(*args)`` from live state.

        Use as ``ctx.on_query("status", lambda: state)`` or as a decorator:
        ``@ctx.on_query("status")``. Query handlers must not change state.
        """
        signals.check_name(name, "query")
        if name == HANDLERS_QUERY:
            raise DefinitionError(f"the query name {name!r} is reserved for engine.handlers()")

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            if not callable(f) or inspect.iscoroutinefunction(f):
                raise DefinitionError(f"query handler {name!r} must be a plain function")
            self._run.query_handlers[name] = chain.wrap_query(self._run, name, f)
            return f

        return register(fn) if fn is not None else register

    def on_signal(self, name: str, handler: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """Apply every ``name`` signal with ``handler(payload)`` (or ``handler()``), in
        arrival order, exactly once, between steps.

        Use as ``ctx.on_signal("add", items.append)`` or as a decorator:
        ``@ctx.on_signal("add")``. The handler is a plain function that changes workflow
        state (``ctx.wait_until`` sees the change); each application is recorded, so replay
        applies the same signals at the same points. Signals buffered before registration
        are applied too. A name has either a handler or ``ctx.wait_for_signal`` waits,
        never both. A handler that raises fails the run.
        """

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            handlers.register(self._run, name, f)
            return f

        return register(handler) if handler is not None else register

    def signal_workflow(self, workflow_id: str, name: str, payload: Any = None) -> Awaitable[None]:
        """Send signal ``name`` to another run, as one durable step, exactly once.

        The signal id is derived from this run and step, so a resend after a crash is
        the same signal. A child reaches its parent with ``ctx.info.parent_id``. An
        unknown or finished target raises ``WorkflowNotFoundError`` /
        ``WorkflowTerminalError`` (recorded: replay raises it again).
        """
        target, checked = outbound.check_signal_args(self._run, workflow_id, name)
        return outbound.signal_workflow(self._run, self._run.alloc_step(), target, checked, payload)

    def cancel_workflow(self, workflow_id: str) -> Awaitable[None]:
        """Ask another run to cancel, as one durable step (asked once, even across crashes).

        Returns once the request is stored, not when the target has finished; a finished
        target is left as it is. An unknown id raises ``WorkflowNotFoundError``.
        """
        target = outbound.check_cancel_target(self._run, workflow_id)
        return outbound.cancel_workflow(self._run, self._run.alloc_step(), target)

    def on_update(
        self,
        name: str,
        handler: Callable[..., Any] | None = None,
        *,
        validator: Callable[..., Any] | None = None,
    ) -> Callable[..., Any]:
        """Handle ``engine.update(id, name, payload)``: ``handler(payload)`` returns the answer.

        A plain handler runs between steps and may change workflow state; its
        application is recorded so replay rebuilds the same state. An ``async def``
        handler may also run activities, sleep and wait (``ctx.run``, ``ctx.sleep``,
        ``ctx.wait_until``...) with steps of its own; the caller gets its result, or
        ``UpdateFailedError`` if it raises. A ``validator`` (always a plain function)
        that raises rejects the update before anything is written.
        Usable as a decorator: ``@ctx.on_update("add")``.
        """
        signals.check_name(name, "update")

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            handler = updates.make_handler(name, f, validator)
            wrapped = chain.wrap_update(self._run, name, handler.fn)
            self._run.update_handlers[name] = dataclasses.replace(handler, fn=wrapped)
            self._run.updates_dirty = True
            return f

        return register(handler) if handler is not None else register

    def wait_for_update(
        self, name: str, *, timeout: Duration | None = None
    ) -> Awaitable[UpdateRequestHandle]:
        """Wait for the next ``name`` update; answer it with ``request.respond(value)``."""
        signals.check_name(name, "update")
        seconds = parse_optional_duration(timeout, field="timeout")
        wait = updates.wait_for_update(self._run, self._run.alloc_step(), name, seconds)
        return chain.operation(self._run, "update", name, wait)

    def all_handlers_finished(self, *, timeout: Duration | None = None) -> Awaitable[bool]:
        """Wait (one durable step) until no async update handler is running, e.g. before
        returning, so no caller is left without an answer. False on timeout."""
        seconds = parse_optional_duration(timeout, field="timeout")
        run = self._base
        return conditions.wait_until(run, run.alloc_step(), lambda: run.handlers.idle, seconds)

    def wait_until(
        self, predicate: Callable[[], object], *, timeout: Duration | None = None
    ) -> Awaitable[bool]:
        """Wait until ``predicate()`` is true (one durable step); False on timeout.

        Re-evaluated whenever an update is applied, a signal arrives or a
        review is decided. Must be awaited by the workflow itself, not in a
        branch.
        """
        seconds = parse_optional_duration(timeout, field="timeout")
        return conditions.wait_until(self._run, self._run.alloc_step(), predicate, seconds)

    def review(
        self,
        artifact: Any,
        *,
        review_type: str = "general",
        reviewers: Iterable[str] = (),
        timeout: Duration | None = None,
        escalation: Iterable[Escalation | dict[str, Any]] = (),
    ) -> Awaitable[ReviewDecision]:
        """Ask people for a decision on ``artifact`` and wait for it (one durable step).

        Decide with ``engine.submit_review(review_id, decision=...)``. Raises
        :class:`~pyweft.ReviewTimeoutError` if ``timeout`` passes first.
        ``escalation`` steps (``{"after": "1h", "to": [...]}`` or
        ``{"after": "1d", "action": "auto-approve"}``) reassign or decide.
        """
        signals.check_name(review_type, "review type")
        people = list(reviews.check_people(reviewers, "reviewers"))
        seconds = parse_optional_duration(timeout, field="timeout")
        steps = tuple(Escalation.parse(e) for e in escalation)
        review = reviews.review_step(
            self._run, self._run.alloc_step(), artifact, review_type, people, seconds, steps
        )
        return chain.operation(self._run, "review", review_type, review)

    # --- composition --------------------------------------------------------------------

    def all(self, *branches: Awaitable[Any]) -> Awaitable[list[Any]]:
        """Run branches concurrently; their results in order.

        Each branch is one durable operation (``ctx.run``, ``ctx.sleep``,
        ``ctx.start_child``, a nested ``ctx.race``...); anything else raises
        :class:`~pyweft.WorkflowUsageError`. A branch that finished stays
        recorded even if a sibling fails; the first failure (by position) is
        raised once every branch settled.
        """
        operations.check_branches("ctx.all", branches)
        return operations.Composite(fanout.all_of(self._run, branches), branches)

    def all_keyed(self, branches: dict[str, Awaitable[Any]]) -> Awaitable[dict[str, Any]]:
        """Like :meth:`all` over a mapping; returns ``{key: result}``."""
        operations.check_branches("ctx.all_keyed", list(branches.values()))
        coro = fanout.all_keyed(self._run, branches)
        return operations.Composite(coro, list(branches.values()))

    def race(self, *branches: Awaitable[Any]) -> Awaitable[Any]:
        """The result of the first branch to settle; the others are cancelled.

        Branches are durable operations, as for :meth:`all`. Which branch won
        is recorded (this is one step), so replay takes the same branch. A
        losing signal wait does not consume its signal.
        """
        operations.check_branches("ctx.race", branches)
        coro = fanout.race_value(self._run, self._run.alloc_step(), branches)
        return chain.operation(self._run, "race", "", operations.Composite(coro, branches))

    def race_keyed(self, branches: dict[str, Awaitable[Any]]) -> Awaitable[tuple[str, Any]]:
        """Like :meth:`race` over a mapping; returns ``(winning key, value)``."""
        operations.check_branches("ctx.race_keyed", list(branches.values()))
        coro = fanout.race_keyed(self._run, self._run.alloc_step(), branches)
        race = operations.Composite(coro, list(branches.values()))
        return chain.operation(self._run, "race", "", race)

    @overload
    def start_child(
        self,
        workflow: Callable[[WorkflowContext, *Ts], Awaitable[T]],
        *args: *Ts,
        id: str | None = None,
        parent_close_policy: Literal["await"] = "await",
        execution_timeout: Duration | None = None,
    ) -> Awaitable[T]: ...
    @overload
    def start_child(
        self,
        workflow: Callable[[WorkflowContext, *Ts], Awaitable[object]],
        *args: *Ts,
        id: str | None = None,
        parent_close_policy: Literal["abandon", "request_cancel"],
        execution_timeout: Duration | None = None,
    ) -> Awaitable[str]: ...
    @overload
    def start_child(
        self,
        workflow: str,
        *args: Any,
        id: str | None = None,
        parent_close_policy: Literal["await"] = "await",
        execution_timeout: Duration | None = None,
    ) -> Awaitable[Any]: ...
    @overload
    def start_child(
        self,
        workflow: str,
        *args: Any,
        id: str | None = None,
        parent_close_policy: Literal["abandon", "request_cancel"],
        execution_timeout: Duration | None = None,
    ) -> Awaitable[str]: ...
    def start_child(
        self,
        workflow: Callable[..., Any] | str,
        *args: object,
        id: str | None = None,
        parent_close_policy: str = "await",
        execution_timeout: Duration | None = None,
    ) -> Awaitable[Any]:
        """Start a child workflow (one durable step).

        With ``parent_close_policy="await"`` (default) the child's result is
        returned, or its failure raised as :class:`~pyweft.ChildWorkflowError`.
        ``"abandon"`` and ``"request_cancel"`` return the child's id at once;
        ``"request_cancel"`` (and ``"await"``) children still running when the
        parent ends are asked to cancel. The default id is ``"{parent id}/{step}"``
        (``"{parent id}/g{generation}/{step}"`` after ``continue_as_new``).
        ``execution_timeout`` ends the child as ``timed_out`` when it overruns; a
        child that is not abandoned never outlives its parent's own deadline.
        """
        timeout_s = parse_optional_duration(execution_timeout, field="execution_timeout")
        if parent_close_policy not in children.POLICIES:
            raise InvalidArgumentError(
                f"parent_close_policy must be one of {', '.join(children.POLICIES)}, "
                f"got {parent_close_policy!r}"
            )
        if id is not None:
            keys.check_text(id, "child id", keys.MAX_ID_BYTES)
        refuse_activity_as_workflow(workflow, "ctx.start_child")
        child = children.child_step(
            self._run, self._run.alloc_step(), workflow, args, id, parent_close_policy, timeout_s
        )
        name = workflow if isinstance(workflow, str) else getattr(workflow, "__name__", "")
        return chain.operation(self._run, "child", name, child)

    def saga(self) -> Saga:
        """A compensation scope: ``async with ctx.saga() as saga: ...``."""
        return Saga(self)

    # --- shared state -------------------------------------------------------------------

    def state(
        self, name: str, *, scope: Literal["run", "workflow"] = "run", initial: Any = None
    ) -> StateHandle[Any]:
        """A durable value shared with other runs: ``scope="run"`` (this run, its parent
        and children: owned by the top-most parent) or ``"workflow"`` (every run of this
        workflow type). ``get``, ``set``, ``update(fn)`` and ``delete`` are steps; writes
        are compare-and-swaps (see docs/guides/state.md)."""
        from pyweft.engine.state.steps import StateHandle

        return StateHandle(self._run, name, scope, initial)

    def lock(self, name: str, *, permits: int = 1, lease: Duration = "5m") -> Lock:
        """A durable lock (``permits=1``) or semaphore shared by every run on the store:
        ``async with ctx.lock("supplier-42"):``. FIFO without barging; released when the
        block exits; a holder whose engine died loses it when ``lease`` runs out (the
        engine renews it while the run lives). See docs/guides/state.md."""
        from pyweft.engine.state.locks import Lock

        return Lock(self._run, name, permits, lease)

    # --- recorded values ----------------------------------------------------------------

    def memo(self, key: str, fn: Callable[[], Any]) -> Awaitable[Any]:
        """Compute ``fn()`` (sync or async) once, as a step; replay returns the recorded value."""
        signals.check_name(key, "memo key")
        return chain.operation(
            self._run, "memo", key, recorded.memo(self._run, self._run.alloc_step(), key, fn)
        )

    def now(self) -> datetime:
        """The current time as the workflow sees it: the moment its latest step was recorded
        (or the run's start). The same on replay, and it costs no write."""
        return to_datetime(self._run.logical_now)

    def uuid4(self) -> uuid.UUID:
        """A random UUID that is the same on replay (seeded from the run id)."""
        return uuid.UUID(int=self._run.rng.getrandbits(128), version=4)

    def random(self) -> float:
        """A float in [0, 1) that is the same on replay."""
        return self._run.rng.random()

    async def get_version(self, change_id: str, min_supported: int, max_supported: int) -> int:
        """Pin which version of a code change this run follows.

        Runs that reach this call while replaying history recorded before the
        change get ``min_supported``; new runs get ``max_supported``. The pin is
        stored and never changes. Branch on it to change code under running
        workflows safely. Calling it takes no step number.
        """
        signals.check_name(change_id, "change id")
        return recorded.get_version(self._run, change_id, min_supported, max_supported)

    async def continue_as_new(self, *args: Any) -> NoReturn:
        """End this run's history and start over with ``args``: same id, empty journal."""
        raise ContinueAsNew(args)

    def set_attributes(self, values: dict[str, Any]) -> None:
        """Set search attributes (``None`` removes one); written with the next commit."""
        run = self._run
        update = attributes.normalize(values)
        new = attributes.merged(run.attributes, update)
        for op in attributes.changes(run.id, run.state.created_at, run.attributes, new):
            run.staged[op.key] = op
        run.attributes = new

    @property
    def attributes(self) -> dict[str, Any]:
        """The run's current search attributes (a copy)."""
        return dict(self._run.attributes)

    # --- published events and streams (issue 16; see messages/published.py) ------------

    def set_event(self, key: str, value: Any) -> Awaitable[None]:
        """Publish ``value`` (any codec value) as this run's event ``key``, as a step.

        Durable when awaited; the latest write wins. Others read it with
        ``engine.get_event(workflow_id, key)``, from any process on the store.
        """
        from pyweft.engine.messages import published

        published.check_key(key)
        return published.set_event(self._run, self._run.alloc_step(), key, value)

    def stream(self, key: str) -> StreamWriter:
        """A durable ordered stream of this run: ``await ctx.stream(key).write(chunk)``
        appends (one step per chunk), ``await ...close()`` ends it. Others follow it
        with ``engine.read_stream(workflow_id, key)``. Takes no step by itself."""
        from pyweft.engine.messages.streams import StreamWriter

        return StreamWriter(self._run, key)
