"""``Client``: the engine's API over HTTP, against ``pyweft serve``.

Every method mirrors ``Engine``'s and raises the same typed errors (the server
sends each error's ``code``; see :mod:`pyweft.client.errors`). Connection errors
are retried with exponential backoff only for calls that are safe to repeat:
reads, and writes that carry their own dedupe key (``start`` with ``id`` or
``idempotency_key``, ``signal`` with ``signal_id``, ``update`` with
``idempotency_key``, cancel/suspend/resume). Anything else fails at once with
``ServerError(status=0)``, because the server may have acted on it.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import httpx

from pyweft import (
    Group,
    History,
    InvalidArgumentError,
    MessageHandlers,
    Page,
    ResultTimeoutError,
    ReviewInfo,
    ServerError,
    UpdateTimeoutError,
    WorkflowEvent,
    WorkflowInfo,
)
from pyweft.client import wire
from pyweft.client.errors import rebuild
from pyweft.client.handle import OMITTED, RemoteWorkflowHandle
from pyweft.client.published import PublishedClient
from pyweft.client.queues import QueuesClient
from pyweft.definitions import workflow_definition_of
from pyweft.durations import DurationLike, parse_duration, parse_optional_duration

ADDR_ENV = "PYWEFT_ADDR"
TOKEN_ENV = "PYWEFT_TOKEN"
DEFAULT_ADDR = "http://127.0.0.1:7233"
API = "/api/v1"
_MAX_WAIT_S = 60.0  # the server's cap on one long poll
_Retry = Literal["all", "connect", "none"]
_TERMINAL = frozenset({"completed", "failed", "cancelled", "timed_out"})


def _type_name(wf: Any) -> str:
    if isinstance(wf, str):
        return wf
    definition = workflow_definition_of(wf)
    if definition is None:
        raise InvalidArgumentError(
            f"start needs a workflow name or an @workflow function, got {wf!r}"
        )
    return definition.name


def _time(value: datetime | float | None) -> str | float | None:
    return value.isoformat() if isinstance(value, datetime) else value


class Client(PublishedClient, QueuesClient):
    """An HTTP client with the engine's methods.

    ``url`` defaults to ``$PYWEFT_ADDR`` (else ``http://127.0.0.1:7233``) and ``token``
    to ``$PYWEFT_TOKEN``; a token ``env:NAME`` is read from that variable. Use it
    with ``async with`` (or call :meth:`aclose`).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.1,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        base = (url or os.environ.get(ADDR_ENV) or DEFAULT_ADDR).rstrip("/")
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        if token and token.startswith("env:"):
            token = os.environ.get(token[4:])
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._retries = max(0, retries)
        self._backoff_s = backoff_s
        self._http = httpx.AsyncClient(
            base_url=base,
            headers=headers,
            timeout=httpx.Timeout(timeout_s + _MAX_WAIT_S, connect=timeout_s),
            transport=transport,
            limits=httpx.Limits(max_keepalive_connections=64, max_connections=256),
        )

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- plumbing ---------------------------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: Any = None,
        idempotent: bool | None = None,
        retry: _Retry | None = None,
    ) -> Any:
        if retry is None:
            safe = method == "GET" if idempotent is None else idempotent
            retry = "all" if safe else "none"
        content = wire.dumps(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if content is not None else None
        attempt = 0
        while True:
            try:
                resp = await self._http.request(
                    method, API + path, content=content, params=params, headers=headers
                )
                break
            except httpx.TransportError as exc:
                retryable = retry == "all" or (
                    retry == "connect"
                    and isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                )
                if not retryable or attempt >= self._retries:
                    raise ServerError(
                        f"no answer from {self._http.base_url} ({type(exc).__name__}: {exc})",
                        status=0,
                    ) from exc
                await asyncio.sleep(self._backoff_s * 2**attempt)
                attempt += 1
        try:
            data = wire.loads(resp.content) if resp.content else None
        except Exception:  # not JSON: a proxy's error page, or not a pyweft server
            if resp.status_code >= 400:
                raise rebuild(resp.status_code, None) from None
            raise ServerError(
                f"HTTP {resp.status_code} from {resp.url} is not JSON; is PYWEFT_ADDR a "
                "pyweft server?",
                status=resp.status_code,
            ) from None
        if resp.status_code >= 400:
            raise rebuild(resp.status_code, data)
        return data

    # --- starting runs ----------------------------------------------------------------

    async def start(
        self,
        wf: Any,
        *args: Any,
        id: str | None = None,
        idempotency_key: str | None = None,
        on_conflict: Literal["fail", "use_existing"] = "fail",
        execution_timeout: DurationLike | None = None,
        start_delay: DurationLike | None = None,
        start_at: datetime | float | None = None,
        tags: Sequence[str] = (),
        attributes: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> RemoteWorkflowHandle:
        body: dict[str, Any] = {"type": _type_name(wf), "args": list(args)}
        for name, value in (
            ("id", id),
            ("idempotency_key", idempotency_key),
            ("execution_timeout", parse_optional_duration(execution_timeout, field="timeout")),
            ("start_delay", parse_optional_duration(start_delay, field="start_delay")),
            ("start_at", _time(start_at)),
            ("attributes", dict(attributes) if attributes else None),
            ("headers", dict(headers) if headers else None),
        ):
            if value is not None:
                body[name] = value
        if on_conflict != "fail":
            body["on_conflict"] = on_conflict
        if tags:
            body["tags"] = list(tags)
        # With an idempotency key a repeat returns the same run, so any lost answer may be
        # retried; with only an id, a repeat after a lost answer would fail on the run the
        # first attempt created, so only a connection that never opened is retried.
        if idempotency_key is not None or on_conflict == "use_existing":
            retry: _Retry = "all"
        else:
            retry = "connect" if id is not None else "none"
        data = await self._call("POST", "/workflows", body=body, retry=retry)
        return RemoteWorkflowHandle(self, data["id"])

    def get_handle(self, workflow_id: str, result_type: object = None) -> RemoteWorkflowHandle:
        return RemoteWorkflowHandle(self, workflow_id)

    async def start_or_signal(
        self,
        wf: Any,
        *args: Any,
        signal: tuple[str, Any],
        id: str | None = None,
        signal_id: str | None = None,
    ) -> tuple[RemoteWorkflowHandle, Literal["started", "signalled"]]:
        if not (isinstance(signal, tuple) and len(signal) == 2):
            raise InvalidArgumentError("signal must be a (name, payload) tuple")
        body: dict[str, Any] = {
            "type": _type_name(wf),
            "args": list(args),
            "signal": signal[0],
            "signal_payload": signal[1],
        }
        if id is not None:
            body["id"] = id
        if signal_id is not None:
            body["signal_id"] = signal_id
        data = await self._call(
            "POST", "/workflows/start-or-signal", body=body, idempotent=signal_id is not None
        )
        return RemoteWorkflowHandle(self, data["id"]), data["outcome"]

    # --- results and control ----------------------------------------------------------

    async def result(self, workflow_id: str, *, timeout: DurationLike | None = None) -> Any:
        """Wait for the run's result with long polls of at most 60 s each."""
        seconds = parse_optional_duration(timeout, field="timeout")
        deadline = None if seconds is None else time.monotonic() + seconds
        path = f"/workflows/{_seg(workflow_id)}/result"
        while True:
            left = _MAX_WAIT_S if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                data = await self._call("GET", path, params={"wait": min(left, _MAX_WAIT_S)})
            except ResultTimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise ResultTimeoutError(
                        f"run {workflow_id!r} did not finish within {seconds:g}s",
                        workflow_id=workflow_id,
                    ) from None
                continue
            return data["result"]

    async def cancel(self, workflow_id: str) -> None:
        await self._call("POST", f"/workflows/{_seg(workflow_id)}/cancel", idempotent=True)

    async def suspend(self, workflow_id: str) -> None:
        await self._call("POST", f"/workflows/{_seg(workflow_id)}/suspend", idempotent=True)

    async def resume(self, workflow_id: str) -> None:
        await self._call("POST", f"/workflows/{_seg(workflow_id)}/resume", idempotent=True)

    async def fail(self, workflow_id: str, reason: str) -> None:
        await self._call("POST", f"/workflows/{_seg(workflow_id)}/fail", body={"reason": reason})

    async def fork(
        self, workflow_id: str, *, from_step: int | None = None, id: str | None = None
    ) -> RemoteWorkflowHandle:
        body: dict[str, Any] = {}
        if from_step is not None:
            body["from_step"] = from_step
        if id is not None:
            body["id"] = id
        data = await self._call("POST", f"/workflows/{_seg(workflow_id)}/fork", body=body)
        return RemoteWorkflowHandle(self, data["id"])

    # --- messages ---------------------------------------------------------------------

    async def signal(
        self, workflow_id: str, name: str, payload: Any = None, *, signal_id: str | None = None
    ) -> None:
        body: dict[str, Any] = {"payload": payload}
        if signal_id is not None:
            body["signal_id"] = signal_id
        await self._call(
            "POST",
            f"/workflows/{_seg(workflow_id)}/signal/{_seg(name)}",
            body=body,
            idempotent=signal_id is not None,
        )

    async def query(
        self, workflow_id: str, name: str, *args: Any, timeout: DurationLike = 5.0
    ) -> Any:
        body = {"args": list(args), "timeout": parse_duration(timeout, field="timeout")}
        data = await self._call(
            "POST", f"/workflows/{_seg(workflow_id)}/query/{_seg(name)}", body=body, idempotent=True
        )
        return data["result"]

    async def handlers(self, workflow_id: str) -> MessageHandlers:
        """The signals, updates and queries the live run takes, with their JSON Schemas."""
        data = await self._call("GET", f"/workflows/{_seg(workflow_id)}/handlers")
        return MessageHandlers.from_dict(workflow_id, data)

    async def update(
        self,
        workflow_id: str,
        name: str,
        payload: Any = OMITTED,
        *,
        timeout: Any = 5.0,
        idempotency_key: str | None = None,
    ) -> Any:
        seconds = parse_optional_duration(timeout, field="timeout")
        total = 5.0 if seconds is None else seconds
        deadline = time.monotonic() + total
        # The server waits at most 60 s per request; a longer timeout keeps waiting for
        # the same update by its id, as the engine's single call would.
        body: dict[str, Any] = {"timeout": min(total, _MAX_WAIT_S)}
        if payload is not OMITTED:
            body["payload"] = payload
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        try:
            data = await self._call(
                "POST",
                f"/workflows/{_seg(workflow_id)}/update/{_seg(name)}",
                body=body,
                idempotent=idempotency_key is not None,
            )
        except UpdateTimeoutError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            return await self._await_update(exc.update_id, left)
        return data["result"]

    async def update_result(self, update_id: str, *, timeout: Any = None) -> Any:
        """The answer to an earlier update, waiting up to ``timeout`` (``None``: until it
        comes), in polls of at most 60 s."""
        seconds = parse_optional_duration(timeout, field="timeout")
        left = float("inf") if seconds is None else seconds
        return await self._await_update(update_id, left)

    async def _await_update(self, update_id: str, left: float) -> Any:
        deadline = time.monotonic() + left
        while True:
            wait = min(max(0.0, deadline - time.monotonic()), _MAX_WAIT_S)
            try:
                data = await self._call("GET", f"/updates/{_seg(update_id)}", params={"wait": wait})
                return data["result"]
            except UpdateTimeoutError:
                if time.monotonic() >= deadline:
                    raise

    async def submit_review(
        self,
        review_id: str,
        decision: Literal["approved", "rejected", "needs_changes"],
        *,
        reviewer: str,
        feedback: str | None = None,
    ) -> None:
        body: dict[str, Any] = {"decision": decision, "reviewer": reviewer}
        if feedback is not None:
            body["feedback"] = feedback
        await self._call("POST", f"/reviews/{_seg(review_id)}/decision", body=body)

    async def list_reviews(
        self,
        *,
        status: str | None = "pending",
        workflow_id: str | None = None,
        review_type: str | None = None,
    ) -> builtins.list[ReviewInfo]:
        params = {"status": status or "all"}
        if workflow_id is not None:
            params["workflow_id"] = workflow_id
        if review_type is not None:
            params["review_type"] = review_type
        data = await self._call("GET", "/reviews", params=params)
        return [wire.review_from_json(r) for r in data["items"]]

    # --- visibility -------------------------------------------------------------------

    async def describe(self, workflow_id: str) -> WorkflowInfo:
        return wire.info_from_json(await self._call("GET", f"/workflows/{_seg(workflow_id)}"))

    async def history(self, workflow_id: str) -> History:
        data = await self._call("GET", f"/workflows/{_seg(workflow_id)}/history")
        return wire.history_from_json(data)

    async def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        workflow_type: str | None = None,
        id_prefix: str | None = None,
        parent_id: str | None = None,
        created_after: datetime | float | None = None,
        created_before: datetime | float | None = None,
        updated_after: datetime | float | None = None,
        updated_before: datetime | float | None = None,
        attributes: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
        failure_category: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[WorkflowInfo]:
        params = _filter_params(
            failure_category=failure_category,
            status=status,
            workflow_type=workflow_type,
            id_prefix=id_prefix,
            parent_id=parent_id,
            created_after=created_after,
            created_before=created_before,
            updated_after=updated_after,
            updated_before=updated_before,
            attributes=attributes,
            tags=tags,
        )
        params.append(("limit", str(limit)))
        if cursor is not None:
            params.append(("cursor", cursor))
        return wire.page_from_json(await self._call("GET", "/workflows", params=params))

    async def aggregate(self, *, group_by: str, **filters: Any) -> builtins.list[Group]:
        params = _filter_params(**filters)
        params.append(("group_by", group_by))
        data = await self._call("GET", "/workflows/aggregate", params=params)
        return [wire.group_from_json(g) for g in data["groups"]]

    async def set_attributes(self, workflow_id: str, values: Mapping[str, Any]) -> None:
        await self._call(
            "PATCH",
            f"/workflows/{_seg(workflow_id)}/attributes",
            body={"attributes": dict(values)},
            idempotent=True,
        )

    async def purge(self, **filters: Any) -> int:
        """Delete finished runs matching ``filters`` (a dry run, then its confirmation)."""
        body = {k: _time(v) if k.endswith(("_after", "_before")) else v for k, v in filters.items()}
        dry = await self._call("POST", "/workflows/purge", body={"filter": body})
        done = await self._call(
            "POST",
            "/workflows/purge",
            body={"filter": body, "dry_run": False, "confirmation": dry["confirmation"]},
        )
        return int(done["purged"])

    # --- events -----------------------------------------------------------------------

    def events(self, workflow_id: str | None = None) -> AsyncIterator[WorkflowEvent]:
        """Events over SSE: every run's from now on, or one run's (those the server still
        holds, then live) until it ends. A dropped connection is resumed from the last
        event id, so nothing the server still holds is lost or repeated."""
        path = (
            "/events/sse" if workflow_id is None else f"/workflows/{_seg(workflow_id)}/events/sse"
        )
        return self._follow(path, workflow_id is not None)

    async def _follow(self, path: str, per_run: bool) -> AsyncIterator[WorkflowEvent]:
        cursor: str | None = None
        attempt = 0
        while True:
            headers = {"Last-Event-ID": cursor} if cursor else {}
            try:
                async with self._http.stream(
                    "GET", API + path, headers=headers, timeout=httpx.Timeout(None, connect=10)
                ) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        raise rebuild(resp.status_code, wire.loads(resp.content))
                    attempt = 0
                    event_id: str | None = None
                    async for line in resp.aiter_lines():
                        if line.startswith("id: "):
                            event_id = line[4:]
                        elif line.startswith("data: ") and event_id is not None:
                            event = wire.event_from_json(json.loads(line[6:]))
                            cursor, event_id = event_id, None
                            yield event
                            if per_run and event.kind in _TERMINAL:
                                return
                if per_run:
                    return  # the server ended the run's feed
            except httpx.TransportError as exc:
                if attempt >= self._retries:
                    raise ServerError(f"event feed lost: {exc}", status=0) from exc
                await asyncio.sleep(self._backoff_s * 2**attempt)
                attempt += 1


def _seg(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


def _filter_params(**filters: Any) -> builtins.list[tuple[str, str]]:
    names = {
        "status",
        "workflow_type",
        "id_prefix",
        "parent_id",
        "created_after",
        "created_before",
        "updated_after",
        "updated_before",
        "attributes",
        "tags",
        "failure_category",
    }
    unknown = set(filters) - names
    if unknown:
        raise InvalidArgumentError(
            f"unknown filter(s) {', '.join(sorted(unknown))}; use {', '.join(sorted(names))}"
        )
    out: builtins.list[tuple[str, str]] = []
    status = filters.get("status")
    if status is not None:
        for s in [status] if isinstance(status, str) else status:
            out.append(("status", s))
    if filters.get("workflow_type") is not None:
        out.append(("type", filters["workflow_type"]))
    for name in ("id_prefix", "parent_id", "failure_category"):
        if filters.get(name) is not None:
            out.append((name, filters[name]))
    for name in ("created_after", "created_before", "updated_after", "updated_before"):
        value = filters.get(name)
        if value is not None:
            out.append((name, str(_time(value))))
    for tag in filters.get("tags") or ():
        out.append(("tag", tag))
    for key, value in (filters.get("attributes") or {}).items():
        if isinstance(value, dict):
            for bound, v in value.items():
                out.append((f"attribute.{key}.{bound}", wire.dumps(v).decode()))
        else:
            out.append((f"attribute.{key}", wire.dumps(value).decode()))
    return out
