"""What every REST handler gets: the request, the engine, the caller, a bounded body.

Endpoints are declared as data (:class:`Endpoint`) so that the router, the auth
matrix test and the OpenAPI document are built from the same table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from pyweft import Engine, InvalidArgumentError, RequestTooLargeError
from pyweft.client.wire import dumps, loads
from pyweft.server.auth import Principal
from pyweft.server.disconnects import unless_disconnected

T = TypeVar("T")


class JSON(Response):
    """A JSON response encoded with msgspec (datetimes, dataclasses and sets included)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)


@dataclass(kw_only=True)
class Call:
    request: Request
    engine: Engine
    principal: Principal
    state: Any  # the ServerState (typed loosely to keep this module below the app)
    _body: Any = None

    @property
    def params(self) -> Mapping[str, str]:
        return self.request.path_params

    @property
    def query(self) -> Any:
        return self.request.query_params

    def body(self) -> dict[str, Any]:
        return self._body if isinstance(self._body, dict) else {}

    async def while_connected(self, wait: Awaitable[T]) -> T:
        """``await wait`` (a long wait: a result, an update's answer...), cancelled when
        the client disconnects first; the route then answers 499 into the closed
        connection. The body has been read by now, so the channel is free to watch."""
        return await unless_disconnected(self.request.receive, wait)


Handler = Callable[[Call], Awaitable[Response]]


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    method: str
    path: str  # under /api/v1, with {name} parameters
    handler: Handler
    scopes: tuple[str, ...] = ()  # any one is enough; () with public=False: any principal
    public: bool = False
    summary: str = ""
    body: dict[str, Any] | None = None  # JSON Schema of the request body, if any
    query: tuple[tuple[str, str, str], ...] = ()  # (name, schema type, description)
    responses: dict[int, str] = field(default_factory=lambda: {200: "OK"})
    tag: str = "workflows"


async def read_json(request: Request, max_bytes: int) -> Any:
    """The request's JSON body, reading at most ``max_bytes`` (``None`` when empty)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit() or (len(declared) > 1 and declared.startswith("0")):
            raise InvalidArgumentError("Content-Length must be a non-negative integer")
        if int(declared) > max_bytes:
            raise RequestTooLargeError(
                f"request body of {declared} bytes exceeds the {max_bytes}-byte limit",
                max_bytes=max_bytes,
            )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise RequestTooLargeError(
                f"request body exceeds the {max_bytes}-byte limit", max_bytes=max_bytes
            )
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return None
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json" and not kind.endswith("+json"):
        # Also keeps browsers from sending a JSON body cross-site without a preflight.
        raise InvalidArgumentError(
            f"request body must be sent as Content-Type: application/json, not {kind or 'none'!r}"
        )
    try:
        value = loads(raw)
    except Exception as exc:
        raise InvalidArgumentError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError("request body must be a JSON object")
    return value


def field_of(
    body: Mapping[str, Any], name: str, kind: type | tuple[type, ...], default: Any
) -> Any:
    """``body[name]`` checked against ``kind`` (``default`` when absent or null)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise InvalidArgumentError(f"{name!r} must be a number, not a boolean")
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InvalidArgumentError(f"{name!r} must be {names}, got {type(value).__name__}")
    return value


def refuse_unknown(body: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = set(body) - allowed
    if unknown:
        raise InvalidArgumentError(
            f"unknown field(s) {', '.join(sorted(unknown))}; accepted: {', '.join(sorted(allowed))}"
        )
