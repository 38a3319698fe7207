"""Async update handlers: an ``async def`` ``on_update`` handler that runs activities,
sleeps and waits before it answers (Temporal's idiom).

Applying one is recorded like a plain handler's application (decision 0006): ONE
commit deletes the request and appends ``kind="async_update"`` to the update log at
the boundary step. No answer is written then. The handler starts at once, drives its
steps through its own journal (``replay/handler_runs.py``), and its answer (value or
error) is written when it returns, conditioned on there being none yet, so the
caller gets exactly one answer however often the run is replayed.

Replay starts the handler again when the application record is reached: its
recorded steps answer from its journal, and a handler a crash interrupted carries on
live from its first unrecorded step until it answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from pyweft.engine.replay import keys, records
from pyweft.engine.replay.handler_runs import HandlerRun
from pyweft.engine.replay.records import AppliedUpdate, UpdateRequest, UpdateResponse
from pyweft.engine.replay.run import Run, Superseded
from pyweft.errors import RunTornDown
from pyweft.storage.base import Delete, Expect, Op, Put

log = logging.getLogger("pyweft.updates")

ASYNC_UPDATE = "async_update"
"""The update-log kind of an application by an ``async def`` handler."""


async def apply(
    run: Run,
    fn: Callable[..., Coroutine[Any, Any, Any]],
    args: tuple[Any, ...],
    key: str,
    raw: bytes,
    req: UpdateRequest,
) -> None:
    """Record the application (request deleted, log appended), then start the handler."""
    services = run.services
    boundary = run.steps_allocated
    index = run.update_index.get(boundary, 0)
    applied = AppliedUpdate(
        boundary=boundary,
        index=index,
        update_id=req.update_id,
        name=req.name,
        payload=req.payload,
        applied_at=services.clock.now(),
        kind=ASYNC_UPDATE,
    )
    ops: list[Op] = [
        Put(key=keys.applied_update(run.id, boundary, index), value=records.encode(applied)),
        Delete(key=key),
    ]
    if not await services.committer.commit(ops, [Expect(key=key, value=raw)], workflow_id=run.id):
        log.warning("update %s of %s was taken by another writer", req.update_id, run.id)
        raise Superseded()
    run.update_index[boundary] = index + 1
    run.notify()  # news for waits and for an eviction decided before the request came
    start(run, fn, args, req.update_id, req.name)


def start(
    run: Run,
    fn: Callable[..., Coroutine[Any, Any, Any]],
    args: tuple[Any, ...],
    update_id: str,
    name: str,
) -> None:
    """Start (or, on replay, restart) one invocation of an async handler."""

    def body(handler: HandlerRun) -> Coroutine[Any, Any, None]:
        return _invoke(run, handler, fn, args)

    run.handlers.start(run, update_id, name, body)


async def _invoke(
    run: Run,
    handler: HandlerRun,
    fn: Callable[..., Coroutine[Any, Any, Any]],
    args: tuple[Any, ...],
) -> None:
    invocations = run.handlers
    try:
        try:
            value = await fn(*args)
            outcome: tuple[bool, Any] = (True, value)
        except Exception as exc:
            if run.torn_down is not None or isinstance(exc, RunTornDown):
                return  # the engine stopped driving the run: replay resumes the handler
            outcome = (False, exc)
        except BaseException:
            return  # cancelled (teardown, the run ended first) or the run is ending
        if run.torn_down is not None:
            return
        invocations.answering.add(handler.update_id)
        await _answer(run, handler, outcome)
    except BaseException as exc:
        if run.teardown_for(exc) is None and not isinstance(exc, RunTornDown):
            log.exception("update handler %s of %s failed to answer", handler.name, run.id)
    finally:
        invocations.answering.discard(handler.update_id)
        invocations.running.pop(handler.update_id, None)
        run.notify()  # ctx.all_handlers_finished() looks again


async def _answer(run: Run, handler: HandlerRun, outcome: tuple[bool, Any]) -> None:
    """Write the answer once: a replayed handler whose answer is stored writes nothing."""
    services = run.services
    key = keys.update_response(handler.update_id)
    if await services.storage.get(key) is not None:
        return
    ok, value = outcome
    now = services.clock.now()
    if ok:
        try:
            payload = run.encode_result(value, f"answer to update {handler.name!r}")
        except Exception as exc:  # too large, not encodable: the update fails with that
            ok, value = False, exc
    response = UpdateResponse(
        update_id=handler.update_id,
        workflow_id=run.id,
        ok=ok,
        answered_at=now,
        value=payload if ok else None,
        error=None if ok else records.error_info(value),
        name=handler.name,
    )
    done = await services.committer.commit(
        [Put(key=key, value=records.encode(response))],
        [Expect(key=key, value=None)],
        workflow_id=run.id,
    )
    if done:
        services.on_update_response(response)
        run.emit("update_completed", name=handler.name, update_id=handler.update_id, ok=ok)


def restart(
    run: Run,
    fn: Callable[..., Coroutine[Any, Any, Any]],
    applied: AppliedUpdate,
    args: tuple[Any, ...],
) -> None:
    """Replay: the application record is reached; run the handler from its journal."""
    start(run, fn, args, applied.update_id, applied.name)
