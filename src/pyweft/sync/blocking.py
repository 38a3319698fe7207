"""A blocking view of an async helper object of the engine (``engine.schedules``,
``engine.state``): each coroutine method becomes a call that waits for its result."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any


class Blocking:
    """``Blocking(target, run)``: ``view.name(...)`` runs ``target.name(...)`` through
    ``run`` (the facade's loop-thread runner) when it is a coroutine method, and
    returns other attributes as they are."""

    __slots__ = ("_run", "_target")

    def __init__(self, target: object, run: Callable[..., Any]) -> None:
        self._target = target
        self._run = run

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        attr = getattr(self._target, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            fn: Callable[..., Coroutine[Any, Any, Any]] = attr
            return self._run(fn, *args, **kwargs)

        call.__name__ = name
        call.__doc__ = attr.__doc__
        return call

    def __dir__(self) -> list[str]:
        return [n for n in dir(self._target) if not n.startswith("_")]
