"""Headers: a small string map carried with a run (context propagation).

Given at ``engine.start(..., headers={...})`` (or added by interceptors that read
the caller's contextvars), stored with the run's record, handed to its children
and to every activity attempt, and the same after a restart. They are visible to
anyone who can read the store: never put secrets in them, put references.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from types import MappingProxyType

from pyweft.errors import InvalidArgumentError

Headers = Mapping[str, str]
EMPTY: Headers = MappingProxyType({})

MAX_HEADERS = 64
MAX_NAME_CHARS = 128
MAX_TOTAL_BYTES = 8 * 1024

_CURRENT: contextvars.ContextVar[Headers] = contextvars.ContextVar("pyweft_headers", default=EMPTY)


def current_headers() -> Headers:
    """The headers of the run (inside a workflow) or of the activity attempt (inside an
    activity) running now; empty elsewhere."""
    return _CURRENT.get()


def enter(headers: Headers) -> contextvars.Token[Headers]:
    return _CURRENT.set(headers)


def leave(token: contextvars.Token[Headers]) -> None:
    _CURRENT.reset(token)


def check_headers(value: object, field: str = "headers") -> dict[str, str]:
    """Headers as given by a caller: a mapping of non-empty ``str`` names to ``str``
    values, at most 64 of them and 8 KiB in all. Raises :class:`InvalidArgumentError`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            f"{field}= must be a mapping of header names to string values, got {value!r}"
        )
    if len(value) > MAX_HEADERS:
        raise InvalidArgumentError(
            f"{field}= has {len(value)} entries; the limit is {MAX_HEADERS}. Headers carry "
            "small context (ids, trace context); put bulk data in arguments"
        )
    total = 0
    out: dict[str, str] = {}
    for name, text in value.items():
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
            raise InvalidArgumentError(
                f"{field}= name {name!r} must be a non-empty string of at most "
                f"{MAX_NAME_CHARS} characters"
            )
        if not isinstance(text, str):
            raise InvalidArgumentError(
                f"{field}[{name!r}] must be a string, got {type(text).__name__} {text!r}; "
                "convert it (str(...)) or pass it as an argument instead"
            )
        total += len(name.encode()) + len(text.encode())
        out[name] = text
    if total > MAX_TOTAL_BYTES:
        raise InvalidArgumentError(
            f"{field}= holds {total} bytes; the limit is {MAX_TOTAL_BYTES}. Headers carry "
            "small context; put bulk data in arguments"
        )
    return out


def frozen(headers: Mapping[str, str] | None) -> Headers:
    return MappingProxyType(dict(headers)) if headers else EMPTY
