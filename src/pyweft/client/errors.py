"""Turn the server's JSON error back into the pyweft exception it was raised as."""

from __future__ import annotations

from typing import Any

from pyweft import errors
from pyweft.errors import PyweftError, ServerError


def _classes() -> dict[str, type[PyweftError]]:
    out: dict[str, type[PyweftError]] = {}
    for value in vars(errors).values():
        if isinstance(value, type) and issubclass(value, PyweftError):
            out[value.code] = value
    return out


_BY_CODE = _classes()


def rebuild(status: int, payload: Any) -> PyweftError:
    """The typed error a response describes; a ``ServerError`` when it names none."""
    err = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("code"), str):
        return ServerError(f"server answered HTTP {status} without an error body", status=status)
    code, message = err["code"], str(err.get("message", ""))
    raw = err.get("details")
    details: dict[str, Any] = raw if isinstance(raw, dict) else {}
    cls = _BY_CODE.get(code)
    if cls is None or cls is ServerError:
        return ServerError(f"{code}: {message}" if cls is None else message, status=status)
    # Build the exception as the server's engine did: same class, message and attributes,
    # without calling an __init__ whose keyword arguments the wire does not promise.
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    for name, value in details.items():
        setattr(exc, name, value)
    return exc
