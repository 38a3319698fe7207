"""Activity mocks: ``env.mock(charge, returns=...)`` replaces what an activity does.

A mock swaps the function inside the activity's definition, the one object that
``ctx.run(charge)``, ``ctx.run("charge")`` and the engine's registry all share, so
every way a workflow calls the activity reaches the mock. It is undone by
``restore()`` (the test environment restores every mock when it closes).

Behaviours: one-shot ones queued with :meth:`MockActivity.returns_once` /
:meth:`raises_once` are used first, in order; then the base behaviour
(``returns=``, ``raises=`` or ``side_effect=``). Each call is recorded with its
arguments, its attempt number and the engine's time.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyweft.clock import Clock
from pyweft.definitions import ActivityDefinition, activity_definition_of
from pyweft.engine.steps.activity_scope import current_activity
from pyweft.errors import InvalidArgumentError

_NOTHING: Any = object()


@dataclass(frozen=True, kw_only=True, slots=True)
class MockCall:
    """One call of a mocked activity."""

    args: tuple[Any, ...]
    attempt: int  # 1 for the first attempt of the step, 2 for its first retry...
    at: float  # the engine's clock (virtual time in a TestEnv)
    result: Any = None
    error: BaseException | None = None


def _behaviour(returns: Any, raises: BaseException | None, side_effect: Any) -> tuple[str, Any]:
    given = [
        name
        for name, present in (
            ("returns", returns is not _NOTHING),
            ("raises", raises is not None),
            ("side_effect", side_effect is not None),
        )
        if present
    ]
    if len(given) > 1:
        raise InvalidArgumentError(
            f"give one of returns=, raises= or side_effect=, not {' and '.join(given)}"
        )
    if raises is not None:
        if not isinstance(raises, BaseException):
            raise InvalidArgumentError(f"raises= must be an exception instance, got {raises!r}")
        return "raises", raises
    if side_effect is not None:
        if not callable(side_effect):
            raise InvalidArgumentError(f"side_effect= must be callable, got {side_effect!r}")
        return "side_effect", side_effect
    return "returns", None if returns is _NOTHING else returns


class MockActivity:
    """A mocked activity: what it does now, and every call it got."""

    def __init__(
        self,
        definition: ActivityDefinition,
        clock: Callable[[], Clock],
        behaviour: tuple[str, Any],
        on_restore: Callable[[MockActivity], None],
    ) -> None:
        self.definition = definition
        self.original: Callable[..., Any] = definition.fn
        self._signature = inspect.signature(self.original)
        self._clock = clock
        self._base = behaviour
        self._once: deque[tuple[str, Any]] = deque()
        self._on_restore = on_restore
        self.calls: list[MockCall] = []
        if behaviour[0] == "side_effect":
            self._check_signature(behaviour[1])
        object.__setattr__(definition, "fn", self._async() if definition.is_async else self._sync)

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def call_count(self) -> int:
        return len(self.calls)

    @property
    def last_call(self) -> MockCall | None:
        return self.calls[-1] if self.calls else None

    def returns_once(self, value: Any) -> MockActivity:
        """The next unanswered call returns ``value`` (chainable; queued in order)."""
        self._once.append(("returns", value))
        return self

    def raises_once(self, error: BaseException) -> MockActivity:
        """The next unanswered call raises ``error`` (chainable; queued in order)."""
        if not isinstance(error, BaseException):
            raise InvalidArgumentError(f"raises_once needs an exception instance, got {error!r}")
        self._once.append(("raises", error))
        return self

    def reset_calls(self) -> None:
        self.calls.clear()

    def restore(self) -> None:
        """Put the real activity back."""
        object.__setattr__(self.definition, "fn", self.original)
        self._on_restore(self)

    # --- calling ----------------------------------------------------------------------

    def _check_signature(self, fn: Callable[..., Any]) -> None:
        try:
            theirs = inspect.signature(fn)
        except (TypeError, ValueError):
            return  # a builtin or a C callable: checked when called
        ours = list(self._signature.parameters.values())
        try:
            theirs.bind(*[object() for p in ours if p.default is p.empty and p.kind in (
                p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])  # fmt: skip
        except TypeError as exc:
            raise InvalidArgumentError(
                f"side_effect for activity {self.name!r} cannot take its arguments "
                f"{self._signature}: {exc}"
            ) from exc

    def _start(self, args: tuple[Any, ...]) -> tuple[str, Any]:
        try:
            self._signature.bind(*args)
        except TypeError as exc:
            raise TypeError(
                f"mocked activity {self.name!r} was called with arguments that do not fit "
                f"{self._signature}: {exc}"
            ) from exc
        return self._once.popleft() if self._once else self._base

    def _record(self, args: tuple[Any, ...], result: Any, error: BaseException | None) -> None:
        scope = current_activity()
        self.calls.append(
            MockCall(
                args=args,
                attempt=scope.attempt if scope is not None else 1,
                at=self._clock().now(),
                result=result,
                error=error,
            )
        )

    def _sync(self, *args: Any) -> Any:
        kind, value = self._start(args)
        try:
            if kind == "raises":
                raise value
            result = value(*args) if kind == "side_effect" else value
            if inspect.isawaitable(result):
                raise TypeError(
                    f"side_effect for the sync activity {self.name!r} returned an awaitable; "
                    "give a plain function"
                )
        except BaseException as exc:
            self._record(args, None, exc)
            raise
        self._record(args, result, None)
        return result

    def _async(self) -> Callable[..., Any]:
        async def call(*args: Any) -> Any:
            kind, value = self._start(args)
            try:
                if kind == "raises":
                    raise value
                result = value(*args) if kind == "side_effect" else value
                if inspect.isawaitable(result):
                    result = await result
            except BaseException as exc:
                self._record(args, None, exc)
                raise
            self._record(args, result, None)
            return result

        return call


class MockRegistry:
    """The mocks of one test environment."""

    def __init__(self, clock: Callable[[], Clock]) -> None:
        self._clock = clock
        self._mocks: dict[int, MockActivity] = {}

    def mock(
        self,
        activity: Callable[..., Any],
        *,
        returns: Any = _NOTHING,
        raises: BaseException | None = None,
        side_effect: Callable[..., Any] | None = None,
    ) -> MockActivity:
        if isinstance(activity, str) or not callable(activity):
            raise InvalidArgumentError(
                f"mock() takes the activity function itself, got {activity!r}"
            )
        definition = activity_definition_of(activity)
        existing = self._mocks.get(id(definition))
        if existing is not None:
            existing.restore()
        behaviour = _behaviour(returns, raises, side_effect)
        made = MockActivity(definition, self._clock, behaviour, self._forget)
        self._mocks[id(definition)] = made
        return made

    def _forget(self, mock: MockActivity) -> None:
        self._mocks.pop(id(mock.definition), None)

    def restore_all(self) -> None:
        for mock in list(self._mocks.values()):
            mock.restore()
