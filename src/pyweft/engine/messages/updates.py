"""Updates: request-response messages that may change a running workflow.

A caller's request is persisted first (with an idempotency mapping when a key
is given), then the run handles it at a step boundary:

* an ``on_update`` handler is applied and, in ONE commit, the request is
  deleted, the response written, and the application recorded in the run's
  update log under the boundary step, so replay re-applies it at the same
  point and rebuilds the same in-memory state;
* or ``ctx.wait_for_update`` consumes it as a step (request deletion in the
  step's commit) and the workflow answers with ``request.respond(value)``.

Callers wait for the response record; after a timeout they can fetch it later
by update id.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyweft.codec import call_types
from pyweft.engine.messages import async_updates, handlers
from pyweft.engine.messages.signals import check_name, terminal_error
from pyweft.engine.replay import keys, records, waits
from pyweft.engine.replay.drift import DriftCall
from pyweft.engine.replay.memory_ahead import commit_ahead
from pyweft.engine.replay.operations import guarded, operation
from pyweft.engine.replay.records import (
    AppliedUpdate,
    ErrorInfo,
    PendingStep,
    StepRecord,
    UpdateRequest,
    UpdateResponse,
)
from pyweft.engine.replay.run import Run, Superseded
from pyweft.engine.replay.services import RunServices
from pyweft.errors import (
    DefinitionError,
    NonDeterminismError,
    PyweftError,
    UpdateFailedError,
    UpdateNotFoundError,
    UpdateRejectedError,
    UpdateTimeoutError,
    WorkflowUsageError,
)
from pyweft.storage.base import Delete, Expect, Op, Put

if TYPE_CHECKING:
    from pyweft.engine.replay.residency import Residency

log = logging.getLogger("pyweft.updates")

OMITTED: Any = object()
"""Sentinel: the caller sent no payload, so the handler gets no argument."""

_SCAN_BATCH = 100


@dataclass(frozen=True, slots=True)
class UpdateHandler:
    fn: Callable[..., Any]
    validator: Callable[..., Any] | None
    payload_type: object
    is_async: bool = False  # an async def handler: runs steps, answers when it returns


def make_handler(
    name: str, fn: Callable[..., Any], validator: Callable[..., Any] | None
) -> UpdateHandler:
    if not callable(fn):
        raise DefinitionError(f"the handler for update {name!r} must be a function, got {fn!r}")
    if validator is not None and (
        inspect.iscoroutinefunction(validator) or not callable(validator)
    ):
        raise DefinitionError(
            f"the validator for update {name!r} must be a plain (non-async) function: it "
            "runs before anything is written and may not take steps"
        )
    types, _, _ = call_types(fn, skip_first=False)
    return UpdateHandler(
        fn=fn,
        validator=validator,
        payload_type=types[0] if types else Any,
        is_async=inspect.iscoroutinefunction(fn),
    )


def _args(run: Run, handler: UpdateHandler, payload: bytes | None) -> tuple[Any, ...]:
    if payload is None:
        return ()
    return (run.services.codec.decode(payload, handler.payload_type),)


# --- applying updates inside a run ----------------------------------------------------


def reapply(run: Run, applied: AppliedUpdate) -> None:
    """Replay: call the handler again with the recorded payload; its answer is not needed."""
    handler = run.update_handlers.get(applied.name)
    if handler is None:
        run.nondeterminism(
            applied.boundary,
            DriftCall(kind="update", name=applied.name, detail="applied by a handler"),
            DriftCall(kind=None, name=None, detail="no handler registered for it at that point"),
            "handler_mismatch",
        )
        return
    if applied.kind == async_updates.ASYNC_UPDATE or handler.is_async:
        if applied.kind != async_updates.ASYNC_UPDATE or not handler.is_async:
            recorded = "an async def" if applied.kind == async_updates.ASYNC_UPDATE else "a plain"
            now = "an async def" if handler.is_async else "a plain"
            run.nondeterminism(
                applied.boundary,
                DriftCall(
                    kind="update", name=applied.name, detail=f"applied by {recorded} handler"
                ),
                DriftCall(kind="update", name=applied.name, detail=f"{now} handler for it"),
                "handler_mismatch",
            )
        async_updates.restart(run, handler.fn, applied, _args(run, handler, applied.payload))
        return
    try:
        handler.fn(*_args(run, handler, applied.payload))
    except NonDeterminismError:
        raise
    except Exception:  # it failed the first time too; the caller already has that answer
        log.debug("update handler %s raised again on replay", applied.name, exc_info=True)


async def process_updates(run: Run) -> None:
    """Apply every pending request that has an ``on_update`` handler. Frontier only.

    An engine failure on the way tears the run down (its memory may now be ahead of
    the store; replay rebuilds it from what was stored). Called from the workflow's own
    task, the teardown is raised; from elsewhere (a wake-up), it is only recorded and
    the run stops at once.
    """
    try:
        await _process_updates(run)
    except BaseException as exc:
        torn = run.teardown_for(exc)
        if torn is None:
            raise
        if asyncio.current_task() is run.task:
            raise torn from exc
        log.info("update processing of %s stopped: %s", run.id, exc)


async def _process_updates(run: Run) -> None:
    if run.replaying or run.done.done() or run.stopping or not run.update_handlers:
        return
    services = run.services
    async with run.update_lock:
        run.updates_dirty = False
        rows = await services.storage.scan(keys.update_prefix(run.id), limit=_SCAN_BATCH)
        for key, raw in rows:
            if run.stopping:
                return  # torn down (maybe while this waited for the lock): replay applies it
            req = records.decode_update(raw)
            handler = run.update_handlers.get(req.name)
            if handler is not None:
                await _apply(run, handler, key, raw, req)
        if len(rows) == _SCAN_BATCH:
            run.updates_dirty = True


async def _apply(
    run: Run, handler: UpdateHandler, key: str, raw: bytes, req: UpdateRequest
) -> None:
    services = run.services
    now = services.clock.now()
    try:
        args = _args(run, handler, req.payload)
        if handler.validator is not None:
            handler.validator(*args)
    except Exception as exc:
        await _respond_rejected(run, key, raw, req, exc)
        return
    if handler.is_async:
        await async_updates.apply(run, handler.fn, args, key, raw, req)
        return
    boundary = run.steps_allocated
    index = run.update_index.get(boundary, 0)
    try:
        value = handler.fn(*args)
        response = UpdateResponse(
            update_id=req.update_id,
            workflow_id=run.id,
            ok=True,
            answered_at=now,
            value=run.encode_result(value, f"answer to update {req.name!r}"),
            name=req.name,
        )
    except Exception as exc:
        response = UpdateResponse(
            update_id=req.update_id,
            workflow_id=run.id,
            ok=False,
            answered_at=now,
            error=records.error_info(exc),
            name=req.name,
        )
    applied = AppliedUpdate(
        boundary=boundary,
        index=index,
        update_id=req.update_id,
        name=req.name,
        payload=req.payload,
        applied_at=now,
    )
    ops: list[Op] = [
        Put(key=keys.applied_update(run.id, boundary, index), value=records.encode(applied)),
        Delete(key=key),
        Put(key=keys.update_response(req.update_id), value=records.encode(response)),
    ]

    def recorded(stored: bool) -> None:
        # The handler has changed the run's memory already: if this commit failed, or
        # another writer took the request, memory is ahead of the store: replay the run.
        if not stored:
            log.warning("update %s of %s was taken by another writer", req.update_id, run.id)
            raise Superseded()
        run.update_index[boundary] = index + 1
        services.on_update_response(response)
        run.emit("update_completed", name=req.name, update_id=req.update_id, ok=response.ok)
        run.notify()

    await commit_ahead(run, ops, [Expect(key=key, value=raw)], recorded)


async def _respond_rejected(
    run: Run, key: str, raw: bytes, req: UpdateRequest, exc: Exception
) -> None:
    response = UpdateResponse(
        update_id=req.update_id,
        workflow_id=run.id,
        ok=False,
        answered_at=run.services.clock.now(),
        error=ErrorInfo(type="UpdateRejectedError", message=str(exc), code="UpdateRejectedError"),
        name=req.name,
    )
    ops: list[Op] = [
        Delete(key=key),
        Put(key=keys.update_response(req.update_id), value=records.encode(response)),
    ]
    if await run.services.committer.commit(ops, [Expect(key=key, value=raw)], workflow_id=run.id):
        run.services.on_update_response(response)


@dataclass(slots=True)
class UpdateRequestHandle:
    """What ``ctx.wait_for_update`` returns: the payload and a way to answer."""

    update_id: str
    name: str
    payload: Any
    _run: Run = field(repr=False)
    _responded: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self._run.unanswered[self.update_id] = self.name  # warned about if never answered

    def respond(self, value: Any = None) -> asyncio.Task[None]:
        """Answer the caller. The answer is written at once; awaiting the task is optional:
        the run does not end (or continue as new) before the answer is stored."""
        self._answering()
        run = self._run
        response = UpdateResponse(
            update_id=self.update_id,
            workflow_id=run.id,
            ok=True,
            answered_at=run.services.clock.now(),
            value=run.encode_result(value, f"answer to update {self.name!r}"),
            name=self.name,
        )
        return self._write(response)

    def fail(self, error: BaseException | str) -> asyncio.Task[None]:
        """Fail the update: the caller gets :class:`~pyweft.UpdateFailedError` with the
        error's type and message (a string fails it as ``ApplicationError``). Written like
        :meth:`respond`; a request is answered or failed once."""
        self._answering()
        info = (
            ErrorInfo(type="ApplicationError", message=error, code="ApplicationError")
            if isinstance(error, str)
            else records.error_info(error)
        )
        response = UpdateResponse(
            update_id=self.update_id,
            workflow_id=self._run.id,
            ok=False,
            answered_at=self._run.services.clock.now(),
            error=info,
            name=self.name,
        )
        return self._write(response)

    def _answering(self) -> None:
        if self._responded:
            raise WorkflowUsageError(f"update {self.update_id!r} was already answered")
        self._responded = True
        self._run.unanswered.pop(self.update_id, None)

    def _write(self, response: UpdateResponse) -> asyncio.Task[None]:
        run = self._run
        task = asyncio.get_running_loop().create_task(_write_response(run, response))
        run.answering.add(task)
        task.add_done_callback(functools.partial(_answer_written, run))
        return task


def _answer_written(run: Run, task: asyncio.Task[None]) -> None:
    run.answering.discard(task)
    # A failed write has torn the run down (its replay answers again), which the run's
    # finish() sees: the task's error counts as seen even if nobody awaits the task.
    if not task.cancelled():
        task.exception()


@guarded
async def _write_response(run: Run, response: UpdateResponse) -> None:
    key = keys.update_response(response.update_id)
    await run.services.committer.commit(
        [Put(key=key, value=records.encode(response))], workflow_id=run.id
    )
    run.services.on_update_response(response)
    run.emit("update_completed", update_id=response.update_id, ok=response.ok)


@operation
async def wait_for_update(
    run: Run, step: int, name: str, timeout_s: float | None
) -> UpdateRequestHandle:
    """Consume the oldest pending ``name`` update as one step."""
    codec = run.services.codec
    rec = run.replay(step, "update", name)
    if rec is not None:
        if not rec.ok:
            raise waits.timeout_error(run, step, "update", name)
        update_id, payload = codec.decode(rec.value or b"", tuple[str, bytes | None])
        value = None if payload is None else codec.decode(payload)
        return UpdateRequestHandle(update_id=update_id, name=name, payload=value, _run=run)
    await run.enter_live()
    clock = run.services.clock
    pend = run.take_pending(step, "update", name)
    started = pend.first_started_at if pend else clock.now()
    deadline = pend.deadline if pend else (None if timeout_s is None else started + timeout_s)
    run.update_waits[name] = run.update_waits.get(name, 0) + 1
    try:
        return await _consume_update(run, step, name, pend, started, deadline)
    finally:
        run.update_waits[name] -= 1
        if not run.update_waits[name]:
            del run.update_waits[name]


async def _consume_update(
    run: Run,
    step: int,
    name: str,
    pend: PendingStep | None,
    started: float,
    deadline: float | None,
) -> UpdateRequestHandle:
    codec, clock = run.services.codec, run.services.clock
    while True:
        seen = run.wake_seq  # before looking (see waits.park)
        rows = await run.services.storage.scan(keys.update_prefix(run.id), limit=_SCAN_BATCH)
        for key, raw in rows:
            req = records.decode_update(raw)
            if req.name != name or name in run.update_handlers:
                continue
            done = StepRecord(
                step=step,
                kind="update",
                name=name,
                ok=True,
                started_at=started,
                finished_at=clock.now(),
                value=codec.encode((req.update_id, req.payload)),
            )
            if await run.commit_step(done, [Delete(key=key)], [Expect(key=key, value=raw)]):
                value = None if req.payload is None else codec.decode(req.payload)
                return UpdateRequestHandle(
                    update_id=req.update_id, name=name, payload=value, _run=run
                )
        if deadline is not None and clock.now() >= deadline:
            raise await waits.record_timeout(run, step, "update", name, started)
        pend = await waits.park(run, step, "update", name, deadline, started, pend, seen)


# --- the caller's side -------------------------------------------------------------------


def _look_again(run: Run | None) -> None:
    """Tell a run driven here that update requests may be waiting for it."""
    if run is None:
        return
    run.updates_dirty = True
    run.notify()
    if run.update_handlers:
        asyncio.get_running_loop().create_task(process_updates(run))


class UpdateClient:
    """Submits updates and waits for their answers."""

    def __init__(
        self, services: RunServices, runs: dict[str, Run], residency: Residency | None = None
    ) -> None:
        self._services = services
        self._runs = runs
        self._residency = residency
        self._waiters: dict[str, list[asyncio.Future[UpdateResponse]]] = {}

    def on_response(self, response: UpdateResponse) -> None:
        for fut in self._waiters.pop(response.update_id, ()):
            if not fut.done():
                fut.set_result(response)

    async def submit(
        self,
        workflow_id: str,
        name: str,
        payload: Any,
        timeout_s: float,
        idempotency_key: str | None,
    ) -> Any:
        check_name(name, "update")
        data = None if payload is OMITTED else self._encode(payload)
        if idempotency_key is not None:
            keys.check_text(idempotency_key, "idempotency_key", keys.MAX_ID_BYTES)
        idem = (
            None
            if idempotency_key is None
            else keys.update_idempotency(workflow_id, idempotency_key)
        )
        if self._residency is None:
            update_id = await self._write(workflow_id, name, data, idempotency_key, idem, [])
        else:
            async with self._residency.sending(workflow_id) as extra:
                update_id = await self._write(workflow_id, name, data, idempotency_key, idem, extra)
        return await self.result(update_id, timeout_s, workflow_id)

    async def _write(
        self,
        workflow_id: str,
        name: str,
        data: bytes | None,
        idempotency_key: str | None,
        idem: str | None,
        extra: list[Op],
    ) -> str:
        """Store the request (or find the one an idempotency key names). Its update id."""
        from pyweft.engine.visibility.reader import not_found

        services, storage = self._services, self._services.storage
        for _ in range(20):
            state_raw = await storage.get(keys.wf(workflow_id))
            if state_raw is None:
                raise not_found(workflow_id)
            state = records.decode_state(state_raw)
            if idem is not None and (existing := await storage.get(idem)) is not None:
                self._nudge(workflow_id)  # a first try's reply may have been lost
                return existing.decode()
            if state.status in records.TERMINAL_STATUSES:
                raise terminal_error(state, f"update {name!r}")
            run = self._runs.get(workflow_id)
            handler = run.update_handlers.get(name) if run is not None else None

            if run is not None and handler is not None and handler.validator is not None:
                try:
                    handler.validator(*_args(run, handler, data))
                except PyweftError:
                    raise
                except Exception as exc:
                    raise UpdateRejectedError(
                        f"update {name!r} to {workflow_id!r} was rejected: {exc}",
                        workflow_id=workflow_id,
                        update=name,
                    ) from exc
            update_id = uuid.uuid4().hex
            now = services.clock.now()
            req = UpdateRequest(
                update_id=update_id,
                name=name,
                payload=data,
                created_at=now,
                idempotency_key=idempotency_key,
            )
            ops: list[Op] = [
                Put(
                    key=keys.update_request(workflow_id, now, update_id), value=records.encode(req)
                ),
                Put(key=keys.update_owner(update_id), value=workflow_id.encode()),
                Put(key=keys.run_update(workflow_id, update_id), value=b""),
                *extra,
            ]
            conds = [Expect(key=keys.wf(workflow_id), value=state_raw)]
            held = self._residency is not None and self._residency.holds(workflow_id)
            if run is None and not held:  # driven elsewhere (or nowhere): leave a wake-up
                ops.append(Put(key=keys.wake(workflow_id), value=keys.wake_value()))
            if idem is not None:
                ops.append(Put(key=idem, value=update_id.encode()))
                conds.append(Expect(key=idem, value=None))
            try:
                committed = await services.committer.commit(ops, conds)
            except BaseException:  # a lost reply, a cancelled caller: stored after all?
                self._nudge(workflow_id)
                raise
            if committed:
                run = self._runs.get(workflow_id)
                if run is not None:
                    _look_again(run)
                elif self._residency is not None:
                    self._residency.wake(
                        workflow_id, unmarked=bool(extra)
                    )  # evicted: replayed, it handles it
                return update_id
        raise RuntimeError(f"could not submit update {name!r} to {workflow_id!r}: contention")

    def _nudge(self, workflow_id: str) -> None:
        """An update for the run may be stored without the usual wake-up: make the run
        look, whether it is in memory here or evicted (nothing else would wake it)."""
        run = self._runs.get(workflow_id)
        if run is not None:
            _look_again(run)
        elif self._residency is not None:
            self._residency.wake(workflow_id)

    def _encode(self, payload: Any) -> bytes:
        data = self._services.codec.encode(payload)
        limit = self._services.max_payload_bytes
        if len(data) > limit:
            from pyweft.codec import payload_size_error

            raise payload_size_error(len(data), limit, what="update payload")
        return data

    async def result(
        self, update_id: str, timeout_s: float | None, workflow_id: str | None = None
    ) -> Any:
        """Wait for an update's answer; raise its failure, or ``UpdateTimeoutError``."""
        storage = self._services.storage
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        if workflow_id is None:
            owner = await storage.get(keys.update_owner(update_id))
            if owner is None:
                raise UpdateNotFoundError(
                    f"no update with id {update_id!r} is known", update_id=update_id
                )
            workflow_id = owner.decode()
        delay = 0.01
        while True:
            fut: asyncio.Future[UpdateResponse] = loop.create_future()
            self._waiters.setdefault(update_id, []).append(fut)
            try:  # the waiter goes however this look ends, a caller's cancellation included
                found = await self._look(update_id, workflow_id, fut, deadline, delay)
            finally:
                _discard(self._waiters, update_id, fut)
            if found is not None:
                return self._outcome(found)
            delay = min(delay * 2, 0.5)

    async def _look(
        self,
        update_id: str,
        workflow_id: str,
        fut: asyncio.Future[UpdateResponse],
        deadline: float | None,
        delay: float,
    ) -> UpdateResponse | None:
        """One look for the answer, then a wait of up to ``delay`` for ``fut``: the
        answer, or ``None`` to look again; raises when there will be none in time."""
        storage = self._services.storage
        loop = asyncio.get_running_loop()
        raw = await storage.get(keys.update_response(update_id))
        if raw is not None:
            return records.decode_response(raw)
        state_raw = await storage.get(keys.wf(workflow_id))
        if state_raw is not None:
            state = records.decode_state(state_raw)
            if state.status in records.TERMINAL_STATUSES:
                if (raw := await storage.get(keys.update_response(update_id))) is not None:
                    return records.decode_response(raw)
                raise terminal_error(state, f"an answer to update {update_id!r}")
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            run = self._runs.get(workflow_id)
            hint = ""
            if run is not None:
                known = sorted({*run.update_handlers, *run.update_waits})
                hint = f" (the run currently handles: {', '.join(known) or 'no updates'})"
            raise UpdateTimeoutError(
                f"update {update_id!r} to {workflow_id!r} was not answered in time{hint}; it "
                "stays queued. Fetch the answer later with engine.update_result(update_id)",
                workflow_id=workflow_id,
                update_id=update_id,
            )
        wait = delay if remaining is None else min(delay, remaining)
        try:
            return await asyncio.wait_for(fut, wait)
        except TimeoutError:
            return None

    def _outcome(self, response: UpdateResponse) -> Any:
        if response.ok:
            value = response.value
            return None if value is None else self._services.codec.decode(value)
        err = response.error or ErrorInfo(type="Exception", message="")
        if err.type == "UpdateRejectedError":
            raise UpdateRejectedError(
                f"update {response.name or response.update_id!r} ({response.update_id}) was "
                f"rejected: {err.message}",
                workflow_id=response.workflow_id,
                update=response.name,
            )
        raise UpdateFailedError(
            f"update {response.update_id!r} failed: {err.type}: {err.message}",
            update_id=response.update_id,
            error_type=err.type,
            error_message=err.message,
        )


def _discard(
    waiters: dict[str, list[asyncio.Future[UpdateResponse]]],
    update_id: str,
    fut: asyncio.Future[UpdateResponse],
) -> None:
    bucket = waiters.get(update_id)
    if bucket is not None:
        if fut in bucket:
            bucket.remove(fut)
        if not bucket:
            waiters.pop(update_id, None)
    fut.cancel()


class _Hooks:
    """The ``UpdateHooks`` the engine hands its runs (``RunServices.updates``)."""

    async def process(self, run: Run) -> None:
        if run.signals_dirty and run.signal_handlers:
            await handlers.apply_signals(run)
        if run.updates_dirty and run.update_handlers:
            await process_updates(run)

    def reapply(self, run: Run, applied: AppliedUpdate) -> None:
        if applied.kind == handlers.SIGNAL:
            handlers.reapply(run, applied)
        else:
            reapply(run, applied)


HOOKS = _Hooks()
