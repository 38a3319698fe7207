"""Durable operations, and why only they may run concurrently inside a workflow.

Replay matches recorded steps to the code by step number, and a step takes its
number when the workflow *calls* the operation. That numbering is the same on
every replay only if every number is taken by the workflow's own task, in code
order. Two things would break it, so both are refused with
:class:`~pyweft.errors.WorkflowUsageError`:

- Branches of ``ctx.all`` / ``ctx.race`` that are not single durable operations
  (``ctx.run``, ``ctx.sleep``, ``ctx.wait_for_signal``, ``ctx.start_child``,
  a nested ``ctx.all`` or ``ctx.race``...). A helper coroutine that awaits one
  step and then calls the next takes its later numbers when the earlier step
  happens to finish, so they depend on timing; and a race's losers never run on
  replay, so whatever they numbered would shift everything after them.
- Taking a step number from any task but the run's own (for example in a
  coroutine run by ``asyncio.gather`` or ``asyncio.create_task``), for the same
  reason.

A sequence of steps that must run concurrently with others belongs in a child
workflow (``ctx.start_child``), which is itself one operation.

Every operation is also where the engine's own failures are kept out of workflow
code: a storage error, a lost lease or a superseded write met while the
operation runs tears the run down and reaches the workflow as
:class:`~pyweft.errors.RunTornDown`, which ``except Exception`` cannot catch.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from types import CodeType, CoroutineType
from typing import Any, Protocol, TypeVar

from pyweft.errors import WorkflowUsageError

F = TypeVar("F", bound=Callable[..., Any])

_OPERATIONS: set[CodeType] = set()

ADVICE = (
    "To run steps concurrently, pass single operations (ctx.run, ctx.sleep, "
    "ctx.wait_for_signal, ctx.start_child, a nested ctx.all or ctx.race, ...) to ctx.all "
    "or ctx.race; put a multi-step branch in a child workflow (ctx.start_child)."
)


class Composite:
    """A ``ctx.all`` / ``ctx.race`` not yet awaited: one operation made of others.

    Awaitable once. Closing it (a race that lost on replay is never run) closes
    its branches too, so none is left unawaited.
    """

    __slots__ = ("_branches", "_coro")

    def __init__(self, coro: Coroutine[Any, Any, Any], branches: Sequence[Awaitable[Any]]):
        self._coro = coro
        self._branches = tuple(branches)

    def __await__(self) -> Generator[Any, None, Any]:
        return self._coro.__await__()

    def close(self) -> None:
        self._coro.close()
        for branch in self._branches:
            discard(branch)


def discard(branch: Awaitable[Any]) -> None:
    """Drop a branch that will never run, without a "never awaited" warning (also the
    operations in a list or tuple given as one branch)."""
    if isinstance(branch, Composite | CoroutineType):
        branch.close()
    elif isinstance(branch, list | tuple):
        for item in branch:
            discard(item)


class Guarded(Protocol):
    """What a guarded operation needs of its run (``Run`` provides it)."""

    def check_alive(self) -> None: ...

    def teardown_for(self, exc: BaseException) -> BaseException | None: ...


def operation(fn: F) -> F:
    """Mark an ``async def`` whose coroutine is one durable operation, numbered at call time.

    Its first argument is the run. Engine failures inside it tear the run down (see
    :func:`guarded`).
    """

    async def durable_operation(run: Guarded, *args: Any, **kwargs: Any) -> Any:
        return await _call_guarded(fn, run, args, kwargs)

    _OPERATIONS.add(durable_operation.__code__)  # one code object serves every operation
    return functools.update_wrapper(durable_operation, fn)  # type: ignore[return-value]


def guarded(fn: F) -> F:
    """For workflow-facing coroutines that are not branch operations (``ctx.all``,
    ``ctx.wait_until``...): engine failures inside them tear the run down."""

    @functools.wraps(fn)
    async def guarded_call(run: Guarded, *args: Any, **kwargs: Any) -> Any:
        return await _call_guarded(fn, run, args, kwargs)

    return guarded_call  # type: ignore[return-value]


async def _call_guarded(
    fn: Callable[..., Awaitable[Any]], run: Guarded, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    run.check_alive()
    try:
        return await fn(run, *args, **kwargs)
    except BaseException as exc:
        torn = run.teardown_for(exc)
        if torn is None:
            raise
        raise torn from exc


def check_branches(what: str, branches: Sequence[Awaitable[Any]]) -> None:
    """Refuse branches that are not durable operations (closing them all first)."""
    for index, branch in enumerate(branches):
        if isinstance(branch, Composite) or (
            isinstance(branch, CoroutineType) and branch.cr_code in _OPERATIONS
        ):
            continue
        for other in branches:
            discard(other)  # never started: closed, so Python does not warn about it
        if isinstance(branch, list | tuple):
            kind = type(branch).__name__
            raise WorkflowUsageError(
                f"{what} branch {index} is a {kind} of {len(branch)} operations, not one; "
                f"pass them unpacked: {what}(*operations)"
            )
        name = getattr(branch, "__qualname__", type(branch).__name__)
        if name.endswith("wait_until"):
            raise WorkflowUsageError(
                f"{what} branch {index} is ctx.wait_until, which cannot be a branch; give it "
                "a timeout= instead"
            )
        raise WorkflowUsageError(
            f"{what} branch {index} ({name}) is not a single durable operation; its later "
            f"steps would be numbered by timing and could not be replayed. {ADVICE}"
        )


def not_in_workflow_task(task_name: str) -> WorkflowUsageError:
    return WorkflowUsageError(
        f"a durable operation was called from task {task_name!r}, not from the workflow "
        f"itself: steps numbered by other tasks depend on timing and cannot be replayed. "
        f"{ADVICE}"
    )
