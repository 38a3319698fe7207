"""The engine's messaging surface: signals, queries, updates, reviews, activities
completed by token, and event streams. ``Engine`` inherits it; the work happens in
the ``messages`` and ``steps`` modules."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, TypeVarTuple, overload

from pyweft.definitions import Duration, refuse_activity_as_workflow
from pyweft.durations import parse_duration, parse_optional_duration
from pyweft.engine.control import creation, update_start
from pyweft.engine.control import debounce as debounce_mod
from pyweft.engine.handle import WorkflowHandle
from pyweft.engine.messages import published, run_queries, streams, terminal_events
from pyweft.engine.messages.handler_catalog import (
    HANDLERS_QUERY,
    MessageHandlers,
    from_answer,
    idle,
)
from pyweft.engine.messages.reviews import ReviewDesk, ReviewInfo
from pyweft.engine.messages.signals import SignalSender
from pyweft.engine.messages.updates import OMITTED, UpdateClient
from pyweft.engine.replay import keys
from pyweft.engine.replay.events import WorkflowEvent
from pyweft.engine.replay.recovery import ids_with_status
from pyweft.engine.steps import async_completion
from pyweft.engine.steps.async_completion import PendingActivity
from pyweft.errors import InvalidArgumentError, QueryUnavailableError, WorkflowTerminalError

if TYPE_CHECKING:
    from pyweft.engine.context import WorkflowContext
    from pyweft.engine.control.core import EngineCore
    from pyweft.engine.engine import Engine

Ts = TypeVarTuple("Ts")
R = TypeVar("R")


class MessagingAPI:
    """Messages to runs and what runs publish (mixed into :class:`~pyweft.Engine`)."""

    _core: EngineCore
    _signals: SignalSender | None
    _updates: UpdateClient | None
    _reviews: ReviewDesk | None

    def _as_engine(self) -> Engine:
        return self  # type: ignore[return-value]  # only ever mixed into Engine

    async def signal(
        self,
        workflow_id: str,
        name: str,
        payload: Any = None,
        *,
        signal_id: str | None = None,
    ) -> None:
        """Send a signal. Returns once it is durably buffered for the run.

        With ``signal_id``, resending the same (workflow, name, id) is a no-op.
        Raises :class:`WorkflowNotFoundError` or :class:`WorkflowTerminalError`.
        """
        self._core.services_or_raise()
        assert self._signals is not None
        await self._signals.send(workflow_id, name, payload, signal_id)

    @overload
    async def start_or_signal(
        self,
        wf: Callable[[WorkflowContext, *Ts], Awaitable[R]],
        *args: *Ts,
        signal: tuple[str, Any],
        id: str | None = None,
        signal_id: str | None = None,
    ) -> tuple[WorkflowHandle[R], Literal["started", "signalled"]]: ...
    @overload
    async def start_or_signal(
        self,
        wf: str,
        *args: Any,
        signal: tuple[str, Any],
        id: str | None = None,
        signal_id: str | None = None,
    ) -> tuple[WorkflowHandle[Any], Literal["started", "signalled"]]: ...
    async def start_or_signal(
        self,
        wf: Callable[..., Any] | str,
        *args: object,
        signal: tuple[str, Any],
        id: str | None = None,
        signal_id: str | None = None,
    ) -> tuple[WorkflowHandle[Any], Literal["started", "signalled"]]:
        """Start the run with ``signal`` already buffered, or signal it if it exists.

        Creating the run and buffering its first signal is one atomic write;
        concurrent callers converge on one run.
        """
        self._core.services_or_raise()
        assert self._signals is not None
        refuse_activity_as_workflow(wf, "engine.start_or_signal")
        if not (isinstance(signal, tuple) and len(signal) == 2):
            raise InvalidArgumentError("signal must be a (name, payload) tuple")
        name, payload = signal
        from pyweft.engine.messages.signals import check_name, check_signal_id

        check_name(name, "signal")
        if signal_id is not None:
            check_signal_id(signal_id)
        workflow_id, created = await creation.create(
            self._core, self._signals, wf, args, id=id, first_signal=(name, payload, signal_id)
        )
        handle: WorkflowHandle[Any] = WorkflowHandle(self._as_engine(), workflow_id)
        if created:
            return handle, "started"
        try:
            await self._signals.send(handle.id, name, payload, signal_id)
        except WorkflowTerminalError:
            # A racing caller may have started the run with this very signal (R38).
            if signal_id is not None and await self._core.storage.get(
                keys.signal_accepted(handle.id, name, signal_id)
            ):
                return handle, "signalled"
            raise
        return handle, "signalled"

    async def query(self, workflow_id: str, name: str, *args: Any, timeout: Duration = 5.0) -> Any:
        """Ask a live run a question; its query handler answers from the run's memory.

        When this engine drives the run, the handler is called at once and nothing
        is written. Otherwise the question goes through the store to the engine
        that drives it, which answers within its ``poll_interval``; ``timeout``
        bounds that wait (``QueryUnavailableError`` when nobody answers). A finished
        run is replayed from its journal here to answer (nothing runs or is written).
        """
        seconds = parse_duration(timeout, field="timeout")
        from pyweft.engine.context import WorkflowContext as replay_context  # a finished run

        return await run_queries.query(
            self._core, workflow_id, name, args, seconds, make_context=replay_context
        )

    async def handlers(self, workflow_id: str, *, timeout: Duration = 5.0) -> MessageHandlers:
        """The signals, updates and queries a live run takes now, with the JSON Schemas of
        their payloads and arguments (from the handlers' type hints), plus the names its
        open ``wait_for_signal``/``wait_for_update`` steps wait on (untyped).

        Handlers are registered by the workflow's code as it runs, so the engine that
        drives the run answers, as for :meth:`query` (``QueryUnavailableError`` if none
        does in ``timeout``). A run that is not ``running`` (finished, pending,
        suspended, blocked) has none to tell: its lists are empty and ``status`` says why.
        """
        seconds = parse_duration(timeout, field="timeout")
        state = await self._core.visibility.state(workflow_id)
        if state.status != "running":
            return idle(workflow_id, state.status)
        try:
            answer = await run_queries.query(self._core, workflow_id, HANDLERS_QUERY, (), seconds)
        except (WorkflowTerminalError, QueryUnavailableError):
            now = await self._core.visibility.state(workflow_id)
            if now.status == "running":
                raise  # nobody answered for a live run
            return idle(workflow_id, now.status)  # it stopped running meanwhile
        return from_answer(workflow_id, answer)

    async def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any = OMITTED,
        *,
        timeout: Any = 5.0,
        idempotency_key: str | None = None,
    ) -> Any:
        """Send an update and wait for the workflow's answer.

        The request is persisted, then handled at the run's next step
        boundary. A validator rejection raises :class:`UpdateRejectedError`
        before anything is written. The same ``idempotency_key`` returns the
        stored answer and never applies the update twice. On timeout,
        :class:`UpdateTimeoutError` carries the ``update_id`` for
        :meth:`update_result`.
        """
        self._core.services_or_raise()
        assert self._updates is not None
        seconds = parse_optional_duration(timeout, field="timeout")
        return await self._updates.submit(
            workflow_id, name, payload, seconds if seconds is not None else 5.0, idempotency_key
        )

    async def update_result(self, update_id: str, *, timeout: Any = None) -> Any:
        """The answer to an earlier update, waiting up to ``timeout`` for it."""
        self._core.services_or_raise()
        assert self._updates is not None
        seconds = parse_optional_duration(timeout, field="timeout")
        return await self._updates.result(update_id, seconds)

    async def submit_review(
        self,
        review_id: str,
        decision: Literal["approved", "rejected", "needs_changes"],
        *,
        reviewer: str,
        feedback: str | None = None,
    ) -> None:
        """Decide a pending review. Durable when this returns; a second decision is refused."""
        self._core.services_or_raise()
        assert self._reviews is not None
        await self._reviews.submit(review_id, decision, reviewer, feedback)

    async def list_reviews(
        self,
        *,
        status: str | None = "pending",
        workflow_id: str | None = None,
        review_type: str | None = None,
    ) -> builtins.list[ReviewInfo]:
        """Reviews, oldest first (``status=None`` for every status)."""
        self._core.services_or_raise()
        assert self._reviews is not None
        return await self._reviews.list(status, workflow_id, review_type)

    # --- activities completed by token (logic in steps/async_completion.py) ----------

    async def complete_activity(self, token: str, result: Any = None) -> None:
        """Complete, with ``result``, the activity attempt that returned
        ``complete_async()`` with this token. Durable when it returns; works from any
        process on the store. ``ActivityTokenNotFoundError`` if nothing waits for the
        token (spent, unknown); ``PayloadError`` leaves the token usable."""
        await async_completion.complete(self._core, token, result)

    async def fail_activity(self, token: str, error: BaseException | str) -> None:
        """Fail that attempt with ``error`` (retried per its policy unless non-retryable,
        e.g. ``ApplicationError(..., non_retryable=True)``)."""
        await async_completion.fail(self._core, token, error)

    async def heartbeat_activity(self, token: str, details: Any = None) -> None:
        """Keep that attempt alive (``heartbeat_timeout``) and record its progress."""
        await async_completion.heartbeat(self._core, token, details)

    async def pending_activities(
        self, workflow_id: str | None = None, *, limit: int = 50
    ) -> builtins.list[PendingActivity]:
        """Activities waiting for completion by token: of one run, or of every running
        run (a scan of running runs: give ``workflow_id`` when you know it)."""
        ids = (
            [] if workflow_id is not None else await ids_with_status(self._core.storage, "running")
        )
        return await async_completion.pending(self._core, workflow_id, ids, limit)

    def events(self, workflow_id: str | None = None) -> AsyncIterator[WorkflowEvent]:
        """Lifecycle events of every run (or one), from now on, in this process."""
        return self._core.events.subscribe(workflow_id)

    def run_events(self, workflow_id: str) -> AsyncIterator[WorkflowEvent]:
        """One run's events until its terminal event. A run that has already finished, or
        finishes in another process, yields its terminal event (read from the store) and
        ends."""
        core = self._core
        return core.events.subscribe(
            workflow_id,
            until_terminal=True,
            ends=lambda: terminal_events.watch_end(core, workflow_id),
        )

    # --- published events and streams (messages/published.py, messages/streams.py) -----

    async def get_event(self, workflow_id: str, key: str, *, timeout: Duration = 60.0) -> Any:
        """The value the run published as ``key`` with ``ctx.set_event`` (the latest one).

        Waits up to ``timeout`` for a first value, and returns ``None`` when none
        came in time, or at once when the run finished without setting it.
        Works from any process on the store. ``WorkflowNotFoundError`` for an
        unknown run.
        """
        seconds = parse_duration(timeout, field="timeout")
        core = self._core
        core.services_or_raise()
        return await published.get_event(core.storage, core.codec, workflow_id, key, seconds)

    def read_stream(
        self, workflow_id: str, key: str, *, from_offset: int = 0
    ) -> AsyncIterator[Any]:
        """Follow the run's stream ``key`` (``ctx.stream(key).write(...)``) live.

        Yields chunks in order from ``from_offset`` (chunk offsets are 0, 1, ...)
        and ends when the stream is closed and read to its end, or when the run has
        finished and every chunk it wrote was read. Works from any process on the
        store. ``WorkflowNotFoundError`` (when iterated) for an unknown run.
        """
        core = self._core
        core.services_or_raise()
        return streams.read(core.storage, core.codec, workflow_id, key, from_offset)

    # --- update-with-start (control/update_start.py) ------------------------------------

    async def update_with_start(
        self,
        wf: Callable[..., Any] | str,
        *args: Any,
        update: tuple[str, Any] | str,
        id: str,
        timeout: Duration = 5.0,
        idempotency_key: str | None = None,
        execution_timeout: Duration | None = None,
        tags: Sequence[str] = (),
    ) -> tuple[WorkflowHandle[Any], Any]:
        """Start run ``id`` if it is absent and deliver an update to it, in one call.

        ``update`` is ``(name, payload)``, or a name for an update without payload.
        Returns ``(handle, answer)``: the handle of the run (new or existing) and
        the update handler's answer. Creating the run and storing the update is one
        atomic write; concurrent callers with the same ``id`` converge on one run and
        each gets its own update applied. ``idempotency_key`` makes a retried call
        return the stored answer without applying the update again. Errors are those
        of :meth:`start` and :meth:`update` (``UpdateTimeoutError`` carries the
        ``update_id`` for :meth:`update_result`).
        """
        self._core.services_or_raise()
        assert self._signals is not None and self._updates is not None
        refuse_activity_as_workflow(wf, "engine.update_with_start")
        if isinstance(update, str):
            name, payload = update, OMITTED
        elif isinstance(update, tuple) and len(update) == 2 and isinstance(update[0], str):
            name, payload = update
        else:
            raise InvalidArgumentError(
                f"update must be a name or a (name, payload) tuple, got {update!r}"
            )
        seconds = parse_optional_duration(timeout, field="timeout")
        workflow_id, answer = await update_start.update_with_start(
            self._core,
            self._signals,
            self._updates,
            wf,
            args,
            id=id,
            update=name,
            payload=payload,
            timeout_s=seconds if seconds is not None else 5.0,
            idempotency_key=idempotency_key,
            execution_timeout=execution_timeout,
            tags=tags,
        )
        return WorkflowHandle(self._as_engine(), workflow_id), answer

    # --- debounce (control/debounce.py) ------------------------------------------------

    async def debounce(
        self,
        key: str,
        wf: Callable[..., Any] | str,
        *args: Any,
        period: Duration,
        max_wait: Duration | None = None,
    ) -> WorkflowHandle[Any]:
        """Collapse calls with the same ``key`` within ``period`` into one run of ``wf``.

        The first call creates a ``pending`` run that starts ``period`` later; each
        later call while it is still pending replaces its arguments with its own and
        pushes its start to ``period`` after itself, but never past ``max_wait``
        after the first call (``None``: no bound). The run starts with the arguments
        of the latest call. Durable and safe for concurrent callers in any process
        on the store. Returns the handle of the run the call joined.
        """
        self._core.services_or_raise()
        assert self._signals is not None
        refuse_activity_as_workflow(wf, "engine.debounce")
        period_s = parse_duration(period, field="period")
        max_wait_s = parse_optional_duration(max_wait, field="max_wait")
        workflow_id, _ = await debounce_mod.debounce(
            self._core, self._signals, key, wf, args, period_s=period_s, max_wait_s=max_wait_s
        )
        return WorkflowHandle(self._as_engine(), workflow_id)
