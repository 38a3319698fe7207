"""Queries: a live run's handlers answer from memory, here or in the process that drives it.

When this engine drives the run, the handler is called at once and nothing is
written. Otherwise the question goes through the store: the asker writes
``qry:{id}:{query_id}`` with a wake-up marker in one batch; the engine that
drives the run sees the marker on its next wake-up scan (within its
``poll_interval``), calls the handler and writes the answer to
``qrs:{id}:{query_id}`` in the same batch that deletes the request; the asker
reads the answer and deletes it. Where the store can notify, the question
and the answer are both announced, so nobody waits for a poll. An asker that
gives up deletes its request, so an answer nobody waits for is only written
when the asker died meanwhile (purge removes those with the run).

The handler's own exception reaches the asker as it is when the run is driven
here, and as :class:`QueryFailedError` (its type name and message) when it was
raised in another process.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyweft.codec import call_types, decode_args, encode_args, payload_size_error
from pyweft.engine.messages.handler_catalog import HANDLERS_QUERY, catalog
from pyweft.engine.messages.signals import check_name
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.records import ErrorInfo, QueryRequest, QueryResponse
from pyweft.engine.replay.run import Run
from pyweft.errors import (
    QueryFailedError,
    QueryNotFoundError,
    QueryUnavailableError,
    WorkflowTerminalError,
)
from pyweft.storage.base import Delete, Expect, Op, Put

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore

log = logging.getLogger("pyweft.queries")

_BATCH = 256  # requests answered per run per wake-up scan
_MAX_DELAY = 0.1  # the asker looks for the answer at least this often


async def query(
    core: EngineCore,
    workflow_id: str,
    name: str,
    args: tuple[Any, ...],
    timeout_s: float,
    make_context: Callable[[Run], Any] | None = None,
) -> Any:
    """Ask ``name`` of the run: here if it is driven here, else through the store; a
    finished run is replayed here to answer (with ``make_context``, the workflow context
    class, which this layer may not import)."""
    core.services_or_raise()
    check_name(name, "query")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    run = await core.resident(workflow_id)  # an evicted run is replayed to answer
    if run is not None and not run.done.done():
        handler = await _handler_soon(run, name, min(timeout_s, REGISTRATION_GRACE_S))
        if handler is not None:
            return handler(*args)
        if not run.done.done():
            _handler(run, name)  # raises QueryNotFoundError
    state = await core.visibility.state(workflow_id)
    if state.status in records.TERMINAL_STATUSES and make_context is not None:
        from pyweft.engine.messages.finished_queries import query_finished

        remaining = max(deadline - loop.time(), 0.001)
        return await query_finished(core, workflow_id, name, args, remaining, make_context)
    _check_answerable(workflow_id, state)
    return await _ask_owner(core, workflow_id, name, args, timeout_s)  # not driven here


REGISTRATION_GRACE_S = 2.0
"""How long a query waits for a run that has not registered the handler yet (one just
started, still running its first lines) before it is told there is no such query."""


async def _handler_soon(run: Run, name: str, grace_s: float) -> Any:
    """The handler, once the run registers it; ``None`` if the run parks in a wait (or
    ends, or ``grace_s`` passes) without registering it: then it has no such query."""
    if name == HANDLERS_QUERY:
        return functools.partial(catalog, run)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    delay = 0.001
    while (handler := run.query_handlers.get(name)) is None:
        if run.done.done() or run.waiting or loop.time() >= deadline:
            return None
        await asyncio.sleep(delay)  # rare (a query racing the run's first lines): no hook
        delay = min(delay * 2, 0.02)
    return handler


def _handler(run: Run, name: str) -> Any:
    if name == HANDLERS_QUERY:  # engine.handlers(): the catalog of what the run takes
        return functools.partial(catalog, run)
    handler = run.query_handlers.get(name)
    if handler is None:
        known = ", ".join(sorted(run.query_handlers)) or "none"
        raise QueryNotFoundError(
            f"workflow {run.id!r} has no query {name!r} (it has: {known})",
            workflow_id=run.id,
            query=name,
        )
    return handler


def _check_answerable(workflow_id: str, state: records.WorkflowState) -> None:
    if state.status in records.TERMINAL_STATUSES:
        raise WorkflowTerminalError(
            f"workflow {workflow_id!r} is {state.status}; queries need a live run",
            workflow_id=workflow_id,
            status=state.status,
        )
    if state.status != "running":
        raise QueryUnavailableError(
            f"workflow {workflow_id!r} is {state.status}, so no engine drives it and nothing "
            "can answer; resume it (or wait for its start) and ask again",
            workflow_id=workflow_id,
        )


async def _ask_owner(
    core: EngineCore, workflow_id: str, name: str, args: tuple[Any, ...], timeout_s: float
) -> Any:
    payload = encode_args(core.codec, args)
    if len(payload) > core.max_payload_bytes:
        raise payload_size_error(len(payload), core.max_payload_bytes, what="query arguments")
    query_id = uuid.uuid4().hex
    request_key = keys.query_request(workflow_id, query_id)
    answer_key = keys.query_response(workflow_id, query_id)
    request = records.encode(QueryRequest(query_id, name, payload, core.clock.now()))
    wake = Put(key=keys.wake(workflow_id), value=keys.wake_value())
    try:  # from the write on: a cancelled write may have been stored all the same
        await core.committer.commit([Put(key=request_key, value=request), wake])
        return await _await_answer(
            core, workflow_id, name, (request_key, request, answer_key), timeout_s
        )
    except asyncio.CancelledError:
        # The asker is gone (a timeout of its own, a client that disconnected): take the
        # question back, or drop its answer, so that neither stays in the store.
        await asyncio.shield(_withdraw(core, request_key, answer_key, request))
        raise


async def _withdraw(core: EngineCore, request_key: str, answer_key: str, request: bytes) -> None:
    """Remove an abandoned question; if the owner answered it already (answering deletes
    the question in the same write), remove the answer instead."""
    if not await core.committer.commit(
        [Delete(key=request_key)], [Expect(key=request_key, value=request)]
    ):
        await core.committer.commit([Delete(key=answer_key)])


async def _await_answer(
    core: EngineCore,
    workflow_id: str,
    name: str,
    question: tuple[str, bytes, str],
    timeout_s: float,
) -> Any:
    """The owner's answer to ``question`` (its key, stored value and answer key), waiting
    up to ``timeout_s``; ``QueryUnavailableError`` (the question taken back) without one."""
    request_key, request, answer_key = question
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    delay = 0.005
    while True:
        news = core.store_news()  # taken before looking, so no notice in between is missed
        raw = await core.storage.get(answer_key)
        if raw is not None:
            await core.committer.commit([Delete(key=answer_key)])
            return _outcome(core, workflow_id, name, records.decode_query_response(raw))
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        with contextlib.suppress(TimeoutError):  # the owner announces its answer, if it can
            async with asyncio.timeout(min(delay, remaining)):
                await news.wait()
        delay = min(delay * 2, _MAX_DELAY)
    # Nobody answered in time: take the question back (unless it was answered meanwhile).
    taken_back = await core.committer.commit(
        [Delete(key=request_key)], [Expect(key=request_key, value=request)]
    )
    if not taken_back:
        raw = await core.storage.get(answer_key)
        if raw is not None:
            await core.committer.commit([Delete(key=answer_key)])
            return _outcome(core, workflow_id, name, records.decode_query_response(raw))
    _check_answerable(workflow_id, await core.visibility.state(workflow_id))
    raise QueryUnavailableError(
        f"no engine answered query {name!r} of workflow {workflow_id!r} within {timeout_s:g}s; "
        "the engine that drives it answers once per poll_interval, so it may be down, "
        "overloaded, or slower to poll than this timeout",
        workflow_id=workflow_id,
    )


def _outcome(core: EngineCore, workflow_id: str, name: str, response: QueryResponse) -> Any:
    if response.ok:
        return None if response.value is None else core.codec.decode(response.value)
    err = response.error or ErrorInfo(type="Exception", message="")
    if err.type == "QueryNotFoundError":
        raise QueryNotFoundError(err.message, workflow_id=workflow_id, query=name)
    raise QueryFailedError(
        f"query {name!r} of workflow {workflow_id!r} failed in the engine that drives it: "
        f"{err.type}: {err.message}",
        workflow_id=workflow_id,
        query=name,
        error_type=err.type,
        error_message=err.message,
    )


async def answer_pending(core: EngineCore, run: Run) -> int:
    """Answer the queries other processes left for ``run`` (driven here). Returns how many."""
    answered = 0
    for key, raw in await core.storage.scan(keys.query_prefix(run.id), limit=_BATCH):
        try:
            request = records.decode_query(raw)
        except Exception:
            log.warning("dropping unreadable query request %s", key)
            await core.committer.commit(
                [Delete(key=key)], [Expect(key=key, value=raw)], workflow_id=run.id
            )
            continue
        answer = records.encode(_answer(core, run, request))
        ops: list[Op] = [
            Delete(key=key),
            Put(key=keys.query_response(run.id, request.query_id), value=answer),
        ]
        if await core.committer.commit(ops, [Expect(key=key, value=raw)], workflow_id=run.id):
            answered += 1
    if answered:
        await core.committer.announce()  # the askers are waiting for it
    return answered


def _answer(core: EngineCore, run: Run, request: QueryRequest) -> QueryResponse:
    try:
        handler = _handler(run, request.name)
        types, _, _ = call_types(handler, skip_first=False)
        value = handler(*decode_args(core.codec, request.args, types))
        encoded = core.codec.encode(value)
        if len(encoded) > core.max_payload_bytes:
            raise payload_size_error(
                len(encoded), core.max_payload_bytes, what=f"answer to query {request.name!r}"
            )
    except Exception as exc:
        return QueryResponse(request.query_id, ok=False, error=records.error_info(exc))
    return QueryResponse(request.query_id, ok=True, value=encoded)
