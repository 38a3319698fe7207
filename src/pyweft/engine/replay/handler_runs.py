"""Journals of async update handlers: each invocation numbers its own steps.

An ``async def`` update handler may run activities, sleep and wait. Its steps cannot
take numbers from the workflow's own sequence (when they happen relative to the
workflow's steps depends on timing), so each invocation gets a sequence of its own:
invocation ``k`` of a generation (counted in the order applications are recorded in
the update log, so replay counts them the same way) numbers its steps from
``keys.handler_step(k, 1)``. Those numbers lie far past any workflow step, so the
journal, pending and per-step keys (tokens, async completions) need no new layout, and
loading, purge and ``continue_as_new`` see them as the run's own keys.

While a handler runs, ``ctx`` resolves to a :class:`HandlerRun`: a view of the run
that takes step numbers from the invocation's sequence and replays from its journal,
and shares everything else (state, services, commits, teardown) with the run.

A handler is started by driving its coroutine by hand until it first really waits:
on replay every recorded step answers at once, so the handler replays its journal at
the point its application record is reached, before the workflow takes its next step,
then carries on live in a task of its own until it answers.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable, Coroutine, Generator, Sequence
from typing import TYPE_CHECKING, Any

from pyweft.engine.replay import keys
from pyweft.engine.replay.drift import open_call, recorded_call, requested_call
from pyweft.engine.replay.flow import RACE_BRANCH, RACE_PENDINGS, Deferred, RunEnding
from pyweft.engine.replay.records import PendingStep, StepRecord
from pyweft.errors import WorkflowUsageError

if TYPE_CHECKING:
    from pyweft.engine.replay.run import Run

log = logging.getLogger("pyweft.handlers")

CURRENT_HANDLER: contextvars.ContextVar[HandlerRun | None] = contextvars.ContextVar(
    "pyweft_current_handler", default=None
)

_OWN = frozenset(
    {
        "base",
        "inside",
        "invocation",
        "journal",
        "pendings",
        "n",
        "task",
        "logical_now",
        "update_id",
        "name",
    }
)


class HandlerRun:
    """The run as one async handler invocation sees it (see the module docstring)."""

    __slots__ = tuple(sorted(_OWN))

    base: Run
    inside: int  # live operations of this handler under way (0: it is between steps)
    invocation: int
    journal: dict[int, StepRecord]
    pendings: dict[int, PendingStep]
    n: int
    task: asyncio.Task[Any] | None
    logical_now: float
    update_id: str
    name: str

    def __init__(
        self,
        base: Run,
        invocation: int,
        journal: dict[int, StepRecord],
        pendings: dict[int, PendingStep],
        update_id: str,
        name: str,
    ) -> None:
        for attr, value in (
            ("base", base),
            ("inside", 0),
            ("invocation", invocation),
            ("journal", journal),
            ("pendings", pendings),
            ("n", 0),
            ("task", None),
            ("logical_now", base.logical_now),
            ("update_id", update_id),
            ("name", name),
        ):
            object.__setattr__(self, attr, value)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.base, attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        if attr in _OWN:
            object.__setattr__(self, attr, value)
        else:
            setattr(self.base, attr, value)

    # --- step numbering and replay, from the invocation's own journal ---------------

    @property
    def steps_taken(self) -> int:
        return keys.handler_step(self.invocation, self.n)

    steps_allocated = steps_taken

    @property
    def replaying(self) -> bool:
        return bool(self.journal)

    def alloc_step(self) -> int:
        if asyncio.current_task() is not self.task:
            raise WorkflowUsageError(
                f"a durable operation of update handler {self.name!r} was called from another "
                "task; a handler's steps must be awaited by the handler itself, in order"
            )
        self.base.check_alive()
        if self.n + 1 >= keys.HANDLER_STEP_SPAN:
            raise WorkflowUsageError(
                f"update handler {self.name!r} took more than {keys.HANDLER_STEP_SPAN - 1} "
                "steps; move a long loop into a child workflow"
            )
        self.n += 1
        return keys.handler_step(self.invocation, self.n)

    def replay(
        self, step: int, kind: str, name: str, args: Sequence[Any] | None = None
    ) -> StepRecord | None:
        base = self.base
        if base.fatal is not None:
            raise RunEnding(base.fatal)
        rec = self.journal.pop(step, None)
        if rec is None:
            return None
        if rec.kind != kind or rec.name != name:
            base.nondeterminism(step, recorded_call(rec), requested_call(kind, name, args))
        if rec.finished_at > self.logical_now:
            self.logical_now = rec.finished_at
        return rec

    def take_pending(
        self, step: int, kind: str, name: str, args: Sequence[Any] | None = None
    ) -> PendingStep | None:
        pend = self.pendings.pop(step, None)
        if pend is not None and (pend.kind != kind or pend.name != name):
            self.base.nondeterminism(step, open_call(pend), requested_call(kind, name, args))
        return pend

    async def enter_live(self) -> None:
        """A handler step runs for real. Messages are applied by the workflow's own flow
        only, and a cancel request is the workflow's to take, so neither is done here."""
        base = self.base
        if base.services.on_live is not None:
            base.services.on_live(base)
        if base.fatal is not None:
            raise RunEnding(base.fatal)
        base.check_alive()

    async def live(self, aw: Any, *, commits_first: bool = False) -> Any:
        """The run's ``live``, counted per handler: a handler between two steps keeps
        the run from counting as idle (it would be evicted with no wake-up for it)."""
        self.inside += 1
        try:
            return await self.base.live(aw, commits_first=commits_first)
        finally:
            self.inside -= 1
            base = self.base
            if base.torn_down is None and not base.stopping:
                # The handler moves on (and may change state): waits look again, and
                # an eviction decided while it was parked sees news and brings it back.
                base.notify()

    async def commit_step(
        self, rec: StepRecord, ops: list[Any] | None = None, conds: list[Any] | None = None
    ) -> bool:
        branch = RACE_BRANCH.get()
        if branch is not None:
            branch.append((rec, list(ops or ()), list(conds or ())))
            return True
        return await self.commit_steps([(rec, list(ops or ()), list(conds or ()))])

    def defer_step(self, rec: StepRecord, ops: list[Any]) -> bool:
        """A handler's steps are committed at once: its clock moves with their commits."""
        return False

    async def commit_steps(self, entries: Deferred) -> bool:
        ok = await self.base.commit_steps(entries)
        if ok:
            for rec, _, _ in entries:
                if rec.finished_at > self.logical_now:
                    self.logical_now = rec.finished_at
        return ok


class Invocations:
    """The async handler invocations of one run's current generation."""

    def __init__(self, journal: dict[int, StepRecord], pendings: dict[int, PendingStep]) -> None:
        # Handler steps loaded with the run are moved out of the workflow's journal.
        self.journals: dict[int, dict[int, StepRecord]] = {}
        self.pendings: dict[int, dict[int, PendingStep]] = {}
        for step in [s for s in journal if s >= keys.HANDLER_STEP_BASE]:
            inv = keys.handler_invocation(step)
            assert inv is not None
            self.journals.setdefault(inv, {})[step] = journal.pop(step)
        for step in [s for s in pendings if s >= keys.HANDLER_STEP_BASE]:
            inv = keys.handler_invocation(step)
            assert inv is not None
            self.pendings.setdefault(inv, {})[step] = pendings.pop(step)
        self.count = 0
        self.running: dict[str, HandlerRun] = {}
        self.answering: set[str] = set()

    def reset(self) -> None:
        """A new generation (``continue_as_new``): numbering starts again."""
        self.journals, self.pendings, self.count = {}, {}, 0

    @property
    def idle(self) -> bool:
        """No invocation is running (what ``ctx.all_handlers_finished`` waits for)."""
        return not self.running

    @property
    def all_waiting(self) -> bool:
        """Every running invocation is inside a live operation (none between steps)."""
        return all(handler.inside > 0 for handler in self.running.values())

    def start(
        self,
        run: Run,
        update_id: str,
        name: str,
        body: Callable[[HandlerRun], Coroutine[Any, Any, None]],
    ) -> None:
        """Start invocation number ``count`` and drive it until it first really waits."""
        if self.count >= keys.MAX_HANDLER_INVOCATIONS:
            raise WorkflowUsageError(
                "this generation started too many async update handlers; use "
                "ctx.continue_as_new to start afresh"
            )
        inv, self.count = self.count, self.count + 1
        if run.torn_down is not None or run.stopping:
            # Recorded, but this run is being stopped (an eviction that judged it idle
            # just before): news, so whoever stops it brings it back, and replay runs it.
            run.wake_seq += 1
            return
        handler = HandlerRun(
            run, inv, self.journals.pop(inv, {}), self.pendings.pop(inv, {}), update_id, name
        )
        self.running[update_id] = handler
        context = contextvars.copy_context()
        context.run(_enter, handler)
        coro = body(handler)
        handler.task = asyncio.current_task()
        try:
            yielded = context.run(coro.send, None)
        except StopIteration:
            return
        task = asyncio.get_running_loop().create_task(
            _resume(coro, yielded), name=f"pyweft-update-{update_id}", context=context
        )
        handler.task = task

    def cancel_all(self, run: Run) -> None:
        """Stop every invocation here (teardown): none answers; replay resumes them.

        An invocation that was between two steps (its parked wait ended after the run
        was judged idle) has work to do that no wake-up time stands for: news is
        signalled, so whoever stopped the run (an eviction) brings it back."""
        if any(handler.inside == 0 for handler in self.running.values()):
            run.wake_seq += 1
        for handler in list(self.running.values()):
            task = handler.task
            if task is not None and task is not asyncio.current_task() and not task.done():
                task.cancel()

    async def abandon(self, run: Run, status: str) -> None:
        """The run ends with handlers still running: warn, and stop them unanswered
        (their callers hear that the run ended). Answers being written are waited for."""
        writing = [h.task for h in self.running.values() if h.update_id in self.answering]
        await asyncio.gather(*[t for t in writing if t is not None], return_exceptions=True)
        if not self.running:
            return
        names = sorted(h.name for h in self.running.values())
        run.warn(
            f"the run ends {status} with {len(names)} update handler(s) still running "
            f"({', '.join(names)}): their callers get WorkflowTerminalError. Await "
            "ctx.all_handlers_finished() before returning."
        )
        tasks = [h.task for h in self.running.values() if h.task is not None]
        for task in tasks:
            if task is not asyncio.current_task():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.running.clear()


def _enter(handler: HandlerRun) -> None:
    CURRENT_HANDLER.set(handler)
    RACE_BRANCH.set(None)  # a handler started inside a race branch is not part of it
    RACE_PENDINGS.set(())


async def _resume(coro: Coroutine[Any, Any, None], first: Any) -> None:
    await _Resumed(coro, first)


class _Resumed:
    """Carries on a coroutine that was driven by hand and is waiting on ``first``."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, None], first: Any) -> None:
        self._coro, self._first = coro, first

    def __await__(self) -> Generator[Any, Any, None]:
        coro, yielded = self._coro, self._first
        while True:
            try:
                sent = yield yielded
            except BaseException as exc:
                try:
                    yielded = coro.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration:
                    return
