"""The HTTP client's events, streams, update-with-start and debounce (mixed into
:class:`~pyweft.client.Client`; the routes are ``server/routes_published.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from pyweft import InvalidArgumentError, ServerError
from pyweft.client import wire
from pyweft.client.errors import rebuild
from pyweft.client.handle import RemoteWorkflowHandle
from pyweft.definitions import workflow_definition_of
from pyweft.durations import DurationLike, parse_duration, parse_optional_duration

API = "/api/v1"
_MAX_WAIT_S = 60.0


def _seg(value: str) -> str:
    return quote(value, safe="")


def _type_name(wf: Any) -> str:
    definition = None if isinstance(wf, str) else workflow_definition_of(wf)
    if definition is None and not isinstance(wf, str):
        raise InvalidArgumentError(f"expected a workflow name or an @workflow function, got {wf!r}")
    return wf if definition is None else definition.name


class PublishedClient:
    """Mixed into ``Client``: it provides ``_call``, ``_http``, ``_retries``, ``_backoff_s``."""

    _http: httpx.AsyncClient
    _retries: int
    _backoff_s: float
    _call: Callable[..., Any]

    async def get_event(self, workflow_id: str, key: str, *, timeout: DurationLike = 60.0) -> Any:
        """The run's published event ``key``, waiting up to ``timeout`` (long polls)."""
        seconds = parse_duration(timeout, field="timeout")
        deadline = time.monotonic() + seconds
        path = f"/workflows/{_seg(workflow_id)}/published/{_seg(key)}"
        while True:
            wait = max(0.0, min(_MAX_WAIT_S, deadline - time.monotonic()))
            data = await self._call("GET", path, params={"wait": f"{wait:.3f}"})
            if data["value"] is not None or time.monotonic() >= deadline:
                return data["value"]
            if wait < _MAX_WAIT_S:  # the server waited the whole time that was left
                return None

    def read_stream(
        self, workflow_id: str, key: str, *, from_offset: int = 0
    ) -> AsyncIterator[Any]:
        """The run's stream over SSE, live; a dropped connection resumes at the next chunk."""
        if isinstance(from_offset, bool) or not isinstance(from_offset, int) or from_offset < 0:
            raise InvalidArgumentError(f"from_offset must be an int >= 0, got {from_offset!r}")
        return self._stream(f"/workflows/{_seg(workflow_id)}/streams/{_seg(key)}/sse", from_offset)

    async def _stream(self, path: str, offset: int) -> AsyncIterator[Any]:
        attempt = 0
        while True:
            try:
                async with self._http.stream(
                    "GET",
                    API + path,
                    params={"from_offset": str(offset)},
                    timeout=httpx.Timeout(None, connect=10),
                ) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        raise rebuild(resp.status_code, wire.loads(resp.content))
                    attempt = 0
                    kind = ""
                    async for line in resp.aiter_lines():
                        if line.startswith("event: "):
                            kind = line[7:]
                        elif line.startswith("data: ") and kind == "chunk":
                            yield wire.loads(line[6:].encode())
                            offset += 1
                        elif line.startswith("data: ") and kind == "end":
                            return
                        elif line.startswith("data: ") and kind == "error":
                            raise rebuild(500, {"error": wire.loads(line[6:].encode())})
            except httpx.TransportError as exc:
                if attempt >= self._retries:
                    raise ServerError(f"stream lost: {exc}", status=0) from exc
                await asyncio.sleep(self._backoff_s * 2**attempt)
                attempt += 1

    async def update_with_start(
        self,
        wf: Any,
        *args: Any,
        update: tuple[str, Any] | str,
        id: str,
        timeout: DurationLike = 5.0,
        idempotency_key: str | None = None,
        execution_timeout: DurationLike | None = None,
        tags: Sequence[str] = (),
    ) -> tuple[RemoteWorkflowHandle, Any]:
        """Start run ``id`` if absent and deliver an update; ``(handle, answer)``."""
        seconds = parse_optional_duration(timeout, field="timeout")
        body: dict[str, Any] = {
            "type": _type_name(wf),
            "args": list(args),
            "id": id,
            "timeout": min(5.0 if seconds is None else seconds, _MAX_WAIT_S),
            "tags": list(tags),
        }
        if isinstance(update, str):
            body["update"] = update
        elif isinstance(update, tuple) and len(update) == 2:
            body["update"], body["payload"] = update
        else:
            raise InvalidArgumentError(
                f"update must be a name or a (name, payload) tuple, got {update!r}"
            )
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        if execution_timeout is not None:
            body["execution_timeout"] = parse_duration(execution_timeout, field="execution_timeout")
        data = await self._call(
            "POST",
            "/workflows/update-with-start",
            body=body,
            idempotent=idempotency_key is not None,
        )
        return RemoteWorkflowHandle(self, data["id"]), data["result"]  # type: ignore[arg-type]

    async def debounce(
        self,
        key: str,
        wf: Any,
        *args: Any,
        period: DurationLike,
        max_wait: DurationLike | None = None,
    ) -> RemoteWorkflowHandle:
        """Collapse calls with one ``key`` within ``period`` into one run."""
        body: dict[str, Any] = {
            "key": key,
            "type": _type_name(wf),
            "args": list(args),
            "period": parse_duration(period, field="period"),
        }
        if max_wait is not None:
            body["max_wait"] = parse_duration(max_wait, field="max_wait")
        data = await self._call("POST", "/workflows/debounce", body=body, idempotent=False)
        return RemoteWorkflowHandle(self, data["id"])  # type: ignore[arg-type]
