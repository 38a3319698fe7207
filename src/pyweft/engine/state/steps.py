"""``ctx.state(name)``: durable shared values read and changed as workflow steps.

Each ``get``, ``set``, ``update`` and ``delete`` is one step: its outcome is in the
run's journal, so a replay returns what the live call saw without reading the
store again. A write commits the new value and the step record in ONE
conditional batch, conditioned on the value's stored bytes as read: a write that
lost a race to another run is retried on the fresh value (``update`` calls its
function again), up to ``max_retries`` times; then the step records
:class:`~pyweft.errors.StateConflictError`, which the workflow may catch (and
which a replay raises again at the same step).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from pyweft.engine.replay import keys
from pyweft.engine.replay import records as run_records
from pyweft.engine.replay.operations import operation
from pyweft.engine.replay.records import ErrorInfo, StepRecord
from pyweft.engine.replay.run import RACE_BRANCH, Run
from pyweft.engine.state import records
from pyweft.engine.state.records import StateRecord
from pyweft.errors import InvalidArgumentError, StateConflictError, WorkflowUsageError
from pyweft.storage.base import Expect, Op, Put

T = TypeVar("T")
DEFAULT_MAX_RETRIES = 20


async def _owner(run: Run, scope: str) -> str:
    """The run whose state this is (the top-most parent), or the workflow type."""
    if scope == "workflow":
        return run.state.type
    state = run.state
    for _ in range(64):  # nesting is bounded far below this
        if state.parent_id is None:
            return state.id
        raw = await run.services.storage.get(keys.wf(state.parent_id))
        if raw is None:
            return state.parent_id  # the parent was purged: its id still names the scope
        state = run_records.decode_state(raw, key=keys.wf(state.parent_id))
    return state.id


def _refuse_in_race(what: str) -> None:
    if RACE_BRANCH.get() is not None:
        raise WorkflowUsageError(
            f"ctx.state(...).{what}() cannot be a branch of ctx.race: a race defers its "
            "branches' writes, so the compare-and-swap could not hold"
        )


@operation
async def read(run: Run, step: int, scope: str, name: str, initial: Any) -> Any:
    rec = run.replay(step, "state", f"get {name}")
    codec = run.services.codec
    if rec is not None:
        return None if rec.value is None else codec.decode(rec.value)
    await run.enter_live()
    started = run.services.clock.now()
    key = records.key_for(scope, await _owner(run, scope), name)
    raw = await run.services.storage.get(key)
    found = None if raw is None else records.decode(raw, key=key).value
    payload = found if found is not None else run.encode_result(initial, f"state {name!r}")
    await run.commit_step(
        StepRecord(
            step=step,
            kind="state",
            name=f"get {name}",
            ok=True,
            started_at=started,
            finished_at=run.services.clock.now(),
            value=payload,
        )
    )
    return codec.decode(payload)


@operation
async def write(
    run: Run,
    step: int,
    scope: str,
    name: str,
    verb: str,
    change: Callable[[Any], Any] | None,
    value: Any,
    initial: Any,
    max_retries: int,
) -> Any:
    """``set`` (``change`` None, ``value``), ``update`` (``change``) or ``delete``."""
    step_name = f"{verb} {name}"
    rec = run.replay(step, "state", step_name)
    codec = run.services.codec
    if rec is not None:
        if not rec.ok:
            raise StateConflictError(
                rec.error.message if rec.error else "state conflict", name=name
            )
        return None if rec.value is None else codec.decode(rec.value)
    _refuse_in_race(verb)
    await run.enter_live()
    clock = run.services.clock
    started = clock.now()
    key = records.key_for(scope, await _owner(run, scope), name)
    for _ in range(max_retries + 1):
        raw = await run.services.storage.get(key)
        old = None if raw is None else records.decode(raw, key=key)
        if verb == "update":
            assert change is not None
            current = initial if old is None or old.value is None else codec.decode(old.value)
            new_value = change(current)
            if inspect.isawaitable(new_value):
                raise WorkflowUsageError(
                    f"ctx.state({name!r}).update(fn): fn must be a plain function returning the "
                    "new value, not a coroutine (it may run several times on conflicts)"
                )
        else:
            new_value = value
        payload = None if verb == "delete" else run.encode_result(new_value, f"state {name!r}")
        stored = StateRecord(
            version=(old.version if old else 0) + 1,
            value=payload,
            updated_at=clock.now(),
            updated_by=run.id,
        )
        done = StepRecord(
            step=step,
            kind="state",
            name=step_name,
            ok=True,
            started_at=started,
            finished_at=clock.now(),
            value=payload,
        )
        ops: list[Op] = [Put(key=key, value=records.encode(stored))]
        if await run.commit_step(done, ops, [Expect(key=key, value=raw)]):
            return None if payload is None else codec.decode(payload)
    error = StateConflictError(
        f"ctx.state({name!r}).{verb}() lost the race to other writers {max_retries + 1} times "
        "in a row; retry later or raise max_retries",
        name=name,
    )
    failed = StepRecord(
        step=step,
        kind="state",
        name=step_name,
        ok=False,
        started_at=started,
        finished_at=clock.now(),
        error=ErrorInfo(type="StateConflictError", message=str(error), code=error.code),
    )
    await run.commit_step(failed)
    raise error


class StateHandle(Generic[T]):
    """A durable value shared by runs: ``ctx.state("counter")``. Each call is one step."""

    __slots__ = ("_initial", "_name", "_run", "_scope")

    def __init__(self, run: Run, name: str, scope: str, initial: T | None) -> None:
        self._run = run
        self._name = records.check_name(name)
        self._scope = records.check_scope(scope)
        self._initial = initial

    @property
    def name(self) -> str:
        return self._name

    def get(self) -> Awaitable[T]:
        """The stored value (``initial`` if it was never written or was deleted)."""
        return read(self._run, self._run.alloc_step(), self._scope, self._name, self._initial)

    def set(self, value: T) -> Awaitable[None]:
        """Store ``value`` (whatever was there)."""
        return write(
            self._run, self._run.alloc_step(), self._scope, self._name, "set", None, value,
            self._initial, DEFAULT_MAX_RETRIES,
        )  # fmt: skip

    def update(
        self, fn: Callable[[T], T], *, max_retries: int = DEFAULT_MAX_RETRIES
    ) -> Awaitable[T]:
        """Store ``fn(current)`` atomically and return it; ``fn`` is called again on the
        fresh value when another writer changed it first (keep it free of side effects)."""
        if not callable(fn):
            raise InvalidArgumentError(f"update() takes a function, got {fn!r}")
        if type(max_retries) is not int or max_retries < 0:
            raise InvalidArgumentError(f"max_retries must be an int >= 0, got {max_retries!r}")
        return write(
            self._run, self._run.alloc_step(), self._scope, self._name, "update", fn, None,
            self._initial, max_retries,
        )  # fmt: skip

    def delete(self) -> Awaitable[None]:
        """Remove the value (a later ``get`` returns ``initial``)."""
        return write(
            self._run, self._run.alloc_step(), self._scope, self._name, "delete", None, None,
            self._initial, DEFAULT_MAX_RETRIES,
        )  # fmt: skip
