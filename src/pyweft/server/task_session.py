"""One remote worker's session: the claims the server holds for it and its frames.

A session outlives its socket: when the socket drops, the claims are kept (and
extended) for the reconnect grace; a worker that registers again with the session
id takes them over. The session claims from the store only while a socket is
attached, the worker is not draining and it has free slots; it never holds more
attempts than the worker's ``concurrency``.

Every store write for a held attempt happens under the session's lock, so a
heartbeat's extension and a result's write never race on the same claim record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket, WebSocketState

from pyweft import PayloadError
from pyweft.engine.tasks.broker import Held, TaskBroker, WorkerLiveness
from pyweft.worker import protocol as p

if TYPE_CHECKING:
    from pyweft.server.task_hub import TaskHub

log = logging.getLogger("pyweft.server.tasks")

_REMEMBER_CANCELLED = 1000
_LOST = (
    "the claim on this attempt was lost (it expired, or the run cancelled the step): "
    "nothing was stored"
)


@dataclass(frozen=True, slots=True)
class TaskStreamEvent:
    """Something that happened on a task stream (for tests, the conformance harness and
    debugging): ``kind`` is ``registered``, ``resumed``, ``task``, ``heartbeat``,
    ``result``, ``cancel``, ``refused``, ``detached``, ``abandoned``, ``ended`` or
    ``shutdown``."""

    kind: str
    worker_id: str
    at: float
    operation_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class Session:
    """A registered remote worker, attached to a socket or waiting for it to come back."""

    def __init__(
        self,
        hub: TaskHub,
        *,
        worker_id: str,
        session_id: str,
        subject: str,
        peer: str | None,
    ) -> None:
        self.hub = hub
        self.broker: TaskBroker = hub.broker
        self.worker_id = worker_id
        self.session_id = session_id
        self.subject = subject
        self.peer = peer
        self.queues: tuple[str, ...] = ()
        self.activities: frozenset[str] = frozenset()
        self.concurrency = 1
        self.held: dict[str, Held] = {}
        self.cancelled: OrderedDict[str, str] = OrderedDict()  # op id -> why (recent)
        self.ws: WebSocket | None = None
        self.worker_draining = False
        self.drain_requested = False  # by an operator (engine.drain_worker)
        self.shutting_down = False  # the server asked the worker to stop
        self.last_heartbeat = time.monotonic()
        self.last_record = 0.0
        self.started_at = hub.broker.clock.now()
        self.completed = 0
        self.failed = 0
        self.ended = False
        self.ended_event = asyncio.Event()
        self.lock = asyncio.Lock()  # store writes for held attempts
        self._send_lock = asyncio.Lock()
        self._kick = asyncio.Event()
        self._claimer: asyncio.Task[None] | None = None
        self._grace: asyncio.Task[None] | None = None
        self._shares: dict[str, tuple[int, int]] = {}
        self._outbox: list[tuple[Held, p.TaskResult]] = []  # results waiting for the store
        self._finishing: set[str] = set()  # their operation ids
        self._flusher: asyncio.Task[None] | None = None

    # --- attach / detach --------------------------------------------------------------

    def configure(self, frame: p.Register, path_queue: str) -> None:
        self.queues = tuple(dict.fromkeys([path_queue, *frame.queues]))
        self.activities = frozenset(frame.activities)
        self.concurrency = frame.concurrency

    @property
    def attached(self) -> bool:
        return self.ws is not None

    @property
    def can_claim(self) -> bool:
        return (
            self.ws is not None
            and not self.ended
            and not (self.worker_draining or self.drain_requested or self.shutting_down)
            and len(self.held) < self.concurrency
        )

    def cancel_grace(self) -> None:
        """A reconnect is taking the session: its grace no longer runs out."""
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None

    def attach(self, ws: WebSocket) -> None:
        self.ws = ws
        self.last_heartbeat = time.monotonic()
        self.cancel_grace()
        self._claimer = asyncio.get_running_loop().create_task(
            self._claim_loop(), name=f"pyweft-task-stream-{self.worker_id}"
        )

    async def detach(self, ws: WebSocket, grace_s: float) -> None:
        """The socket ``ws`` closed: keep the claims for ``grace_s``, then give them up."""
        if self.ws is not ws:
            return  # already replaced by a reconnect
        self.ws = None
        await self._stop_claiming()
        await self._settle_results()  # what the worker sent before it left is stored
        if self.ws is not None or self.ended:
            return  # a reconnect took the session over meanwhile (or it ended)
        self.hub.emit("detached", self.worker_id, held=len(self.held))
        if self.shutting_down or not self.held:
            # Told to stop (what it still held did not run to the end: same attempt), or
            # nothing to keep for it.
            await self.end("the worker disconnected", hand_back=True)
        else:
            self._grace = asyncio.get_running_loop().create_task(self._grace_then_abandon(grace_s))

    async def detach_for_takeover(self) -> None:
        """A reconnect replaces a socket the server still thinks open: stop using it."""
        self.ws = None
        await self._stop_claiming()

    async def _grace_then_abandon(self, grace_s: float) -> None:
        await asyncio.sleep(grace_s)
        if self.ws is None and not self.ended:
            self._grace = None
            why = (
                f"worker {self.worker_id!r} disconnected and did not reconnect within the "
                f"{grace_s:g}s grace"
            )
            await self.end(why, hand_back=False)

    async def _stop_claiming(self) -> None:
        """Let the claim loop see that its socket is gone and finish: not cancelled, so a
        claim it is writing is not lost between the store and ``held`` (what it claims
        then cannot be sent and goes straight back)."""
        claimer, self._claimer = self._claimer, None
        if claimer is not None and claimer is not asyncio.current_task():
            self._kick.set()
            await asyncio.gather(claimer, return_exceptions=True)

    async def _settle_results(self) -> None:
        """Wait until the results already received are written."""
        flusher = self._flusher
        if flusher is not None and not flusher.done() and flusher is not asyncio.current_task():
            await asyncio.gather(flusher, return_exceptions=True)

    async def end(self, why: str, *, hand_back: bool) -> None:
        """Give up every held attempt (``hand_back``: as the same attempt, for a worker that
        was told to stop; else failed, for one that vanished) and forget the session."""
        if self.ended:
            return
        self.ended = True
        await self._stop_claiming()
        await self._settle_results()
        if self._grace is not None and self._grace is not asyncio.current_task():
            self._grace.cancel()
        async with self.lock:
            for held in list(self.held.values()):
                try:
                    if hand_back:
                        await self.broker.hand_back(held)
                    else:
                        await self.broker.abandon(held, why)
                        self.hub.emit("abandoned", self.worker_id, held.id, why=why)
                except Exception:
                    log.exception("task %s of worker %s could not be given up", held.id, why)
            self.held.clear()
        with contextlib.suppress(Exception):
            await self.broker.forget(self.worker_id)
        self.hub.forget(self)
        self.ended_event.set()
        self.hub.emit("ended", self.worker_id, why=why)

    # --- sending ----------------------------------------------------------------------

    async def send(self, frame: Any) -> bool:
        return await self._send_text(p.encode(frame))

    async def close(self, code: int, reason: str = "") -> None:
        ws = self.ws
        if ws is not None and ws.application_state == WebSocketState.CONNECTED:
            with contextlib.suppress(Exception):
                await ws.close(code=code, reason=reason)

    def kick(self) -> None:
        self._kick.set()

    # --- claiming ---------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        ws = self.ws
        while self.ws is ws and ws is not None and not self.ended:
            got = 0
            if self.can_claim:
                try:
                    got = await self.claim_now()
                except Exception:
                    log.exception("claiming for remote worker %s failed; retrying", self.worker_id)
            if got and self.can_claim:
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.hub.options.poll_interval_s):
                    await self._kick.wait()
            self._kick.clear()

    async def claim_now(self) -> int:
        sent = 0
        for queue in self.queues:
            free = self.concurrency - len(self.held)
            if free <= 0 or not self.can_claim:
                break
            share = self._shares.get(queue, (0, 1))
            for held in await self.broker.claim(queue, self.worker_id, free, share):
                if await self._offer(held):
                    sent += 1
        return sent

    async def _offer(self, held: Held) -> bool:
        task = held.task
        if task.activity not in self.activities:
            known = ", ".join(sorted(self.activities))
            await self._refuse(
                held,
                f"remote worker {self.worker_id!r} has no activity {task.activity!r} (it "
                f"registered: {known}); register it on a worker of queue {task.queue!r}",
            )
            return False
        try:
            args = self.broker.decode_input(held)
        except PayloadError as exc:
            await self._refuse(held, f"the server cannot decode the task's arguments: {exc}")
            return False
        self.held[held.id] = held
        frame = p.Task(
            operation_id=held.id,
            attempt_token=held.token,
            activity_name=task.activity,
            input=args,
            attempt=task.attempt,
            queue=task.queue,
            workflow_id=task.workflow_id,
            workflow_type=task.workflow_type,
            step=task.step,
            generation=task.generation,
            execution_token=task.execution_token,
            scheduled_at_ms=task.scheduled_at * 1000,
            visibility_timeout_ms=round(task.visibility_s * 1000),
            timeout_ms=None if task.timeout_s is None else round(task.timeout_s * 1000),
            heartbeat_timeout_ms=(
                None if task.heartbeat_timeout_s is None else round(task.heartbeat_timeout_s * 1000)
            ),
            headers=task.headers,
        )
        try:
            text = p.encode(frame)
        except (TypeError, ValueError) as exc:  # a value JSON cannot hold
            self.held.pop(held.id, None)
            await self._refuse(held, f"the task's arguments cannot be sent as JSON: {exc}")
            return False
        if not await self._send_text(text):
            # Never delivered: it did not run, so it goes back as the same attempt.
            async with self.lock:
                if self.held.pop(held.id, None) is not None:
                    await self.broker.hand_back(held)
            return False
        self.hub.emit(
            "task",
            self.worker_id,
            held.id,
            activity=task.activity,
            attempt=task.attempt,
            workflow_id=task.workflow_id,
        )
        return True

    async def _send_text(self, text: str) -> bool:
        ws = self.ws
        if ws is None or ws.application_state != WebSocketState.CONNECTED:
            return False
        try:
            async with self._send_lock:
                await ws.send_text(text)
        except Exception:  # the socket is going; its reader will detach it
            return False
        return True

    async def _refuse(self, held: Held, why: str) -> None:
        log.error("task %s handed back: %s", held.id, why)
        async with self.lock:
            await self.broker.hand_back(held, refuse=True, error=why)
        self.hub.emit("refused", self.worker_id, held.id, why=why)

    # --- frames from the worker ---------------------------------------------------------

    async def on_heartbeat(self) -> None:
        self.last_heartbeat = time.monotonic()
        self.hub.emit("heartbeat", self.worker_id, held=len(self.held))
        await self.keep(extend_only=True)

    async def on_drain(self) -> None:
        self.worker_draining = True
        await self.write_record()

    async def on_result(self, frame: p.TaskResult) -> None:
        """Queue a result for the store and return: the socket's next frames are read while
        it is written, and results that arrive meanwhile share one write."""
        op, token = frame.operation_id, frame.attempt_token
        held = self.held.get(op)
        if held is None or held.token != token:
            why = self.cancelled.get(op) if held is None else None
            await self.send(
                p.ResultRejected(
                    operation_id=op,
                    attempt_token=token,
                    code="stale",
                    message=(
                        f"this worker no longer holds {op!r}: {why}"
                        if why
                        else f"this session holds no attempt {op!r} with that token"
                    ),
                )
            )
            self.hub.emit("result", self.worker_id, op, status=frame.status, stored=False)
            return
        if op in self._finishing:
            return  # sent again (after a reconnect) while the first copy is being stored
        self._finishing.add(op)
        self._outbox.append((held, frame))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        while self._outbox:
            batch, self._outbox = self._outbox, []
            try:
                async with self.lock:
                    replies = await self._store(batch)
            except Exception:
                # Nothing of the batch is acknowledged: the socket closes (1011), the worker
                # reconnects and sends these results again.
                log.exception("storing the results of remote worker %s failed", self.worker_id)
                self._finishing.difference_update(h.id for h, _ in batch)
                self._outbox = []
                await self.close(1011, "server error; reconnect")
                return
            for (held, frame), reply in zip(batch, replies, strict=True):
                self._finishing.discard(held.id)
                await self.send(reply)
                stored = isinstance(reply, p.ResultAck)
                self.hub.emit("result", self.worker_id, held.id, status=frame.status, stored=stored)
            self.kick()

    async def _store(self, batch: list[tuple[Held, p.TaskResult]]) -> list[Any]:
        """Write a batch of results (under the lock); the reply frame of each."""
        replies: list[Any] = [None] * len(batch)
        outcomes: list[tuple[int, Held, Any]] = []
        for i, (held, frame) in enumerate(batch):
            if self.held.get(held.id) is not held:  # lost meanwhile (cancelled, ended)
                replies[i] = self._stale(frame, "the attempt was given up meanwhile")
                continue
            if frame.status in ("completed", "failed"):
                try:
                    outcomes.append((i, held, self._outcome(held, frame)))
                except PayloadError as exc:
                    failure = self.broker.failed(
                        held,
                        self.worker_id,
                        error_type="PayloadError",
                        message=f"the worker's result cannot be stored: {exc}",
                        non_retryable=True,
                    )
                    outcomes.append((i, held, failure))
                    replies[i] = p.ResultRejected(
                        operation_id=held.id,
                        attempt_token=held.token,
                        code="invalid",
                        message=str(exc),
                    )
                continue
            err = frame.error
            message = err.message if isinstance(err, p.TaskError) else err
            if frame.status == "rejected":
                why = (
                    message or f"remote worker {self.worker_id!r} cannot run {held.task.activity!r}"
                )
                log.error("task %s handed back: %s", held.id, why)
                ok = await self.broker.hand_back(held, refuse=True, error=why)
            else:  # cancelled: the worker stopped it; the attempt did not fail
                ok = await self.broker.hand_back(held)
            self.held.pop(held.id, None)
            replies[i] = self._ack(frame) if ok else self._stale(frame, _LOST)
        oks = await self.broker.finish([(h, r) for _, h, r in outcomes])
        for (i, held, result), ok in zip(outcomes, oks, strict=True):
            self.held.pop(held.id, None)
            if ok:
                self.completed += result.ok
                self.failed += not result.ok
            if replies[i] is None:
                replies[i] = self._ack(batch[i][1]) if ok else self._stale(batch[i][1], _LOST)
        return replies

    def _outcome(self, held: Held, frame: p.TaskResult) -> Any:
        if frame.status == "completed":
            return self.broker.completed(held, frame.value, self.worker_id)
        err = frame.error
        if isinstance(err, p.TaskError):
            return self.broker.failed(
                held,
                self.worker_id,
                error_type=err.type,
                message=err.message,
                non_retryable=err.non_retryable,
                timeout_kind=err.timeout_kind,
                traceback=err.stack,
            )
        return self.broker.failed(
            held,
            self.worker_id,
            error_type="Error",
            message=err or "the worker reported a failure without an error",
        )

    @staticmethod
    def _ack(frame: p.TaskResult) -> p.ResultAck:
        return p.ResultAck(operation_id=frame.operation_id, attempt_token=frame.attempt_token)

    @staticmethod
    def _stale(frame: p.TaskResult, why: str) -> p.ResultRejected:
        return p.ResultRejected(
            operation_id=frame.operation_id,
            attempt_token=frame.attempt_token,
            code="stale",
            message=why,
        )

    # --- keeping claims -------------------------------------------------------------------

    async def keep(self, *, extend_only: bool = False) -> None:
        """Extend the claims that are due; unless ``extend_only``, also notice attempts the
        run no longer waits for, and tell the worker to cancel them."""
        async with self.lock:
            held = list(self.held.values())
            if not held:
                return
            lost: list[tuple[Held, str]] = []
            if not extend_only:
                for h, ok in zip(held, await self.broker.still_held(held), strict=True):
                    if not ok:
                        lost.append(
                            (h, "the run no longer waits for it (cancelled, or its claim expired)")
                        )
                gone = {id(h) for h, _ in lost}
                held = [h for h in held if id(h) not in gone]
            for h in await self.broker.extend_due(held):
                lost.append((h, "its claim was taken while it was being extended"))
            for h, why in lost:
                self.held.pop(h.id, None)
                self.cancelled[h.id] = why
                while len(self.cancelled) > _REMEMBER_CANCELLED:
                    self.cancelled.popitem(last=False)
        for h, why in lost:
            await self.send(p.Cancel(operation_id=h.id, attempt_token=h.token, reason=why))
            self.hub.emit("cancel", self.worker_id, h.id, why=why)
        if lost:
            self.kick()

    def visibility_floor(self) -> float | None:
        vis = [h.task.visibility_s for h in self.held.values()]
        return min(vis) if vis else None

    async def write_record(self) -> None:
        if self.ended:
            return
        was = self.drain_requested
        self.drain_requested = await self.broker.beat(
            WorkerLiveness(
                worker_id=self.worker_id,
                queues=self.queues,
                activities=tuple(sorted(self.activities)),
                concurrency=self.concurrency,
                in_flight=len(self.held),
                started_at=self.started_at,
                expires_in_s=3 * self.hub.options.heartbeat_interval_s
                + self.hub.options.reconnect_grace_s,
                host=TaskBroker.host_label(self.peer),
                draining=self.worker_draining or self.drain_requested or self.shutting_down,
                completed=self.completed,
                failed=self.failed,
            )
        )
        self.last_record = time.monotonic()
        if self.ended:  # it ended while the record was written: do not leave it behind
            await self.broker.forget(self.worker_id)
            return
        if was and not self.drain_requested:
            self.kick()
        self._shares = await self.broker.shares(self.worker_id, self.queues)

    def silent_for(self) -> float:
        return time.monotonic() - self.last_heartbeat

    def resume(self, frame: p.Register) -> tuple[list[str], list[tuple[str, str]], list[Held]]:
        """Reconcile what the reconnecting worker says it has with what the session
        holds: (kept ids, attempts to cancel on the worker, held ones it lost)."""
        has = {a.operation_id: a.attempt_token for a in frame.in_flight}
        kept: list[str] = []
        lost: list[Held] = []
        for op, held in list(self.held.items()):
            if has.get(op) == held.token:
                kept.append(op)
            else:
                lost.append(held)
                del self.held[op]
        cancel = [(op, tok) for op, tok in has.items() if op not in self.held]
        return kept, cancel, lost


def new_event(kind: str, worker_id: str, op: str | None, detail: dict[str, Any]) -> TaskStreamEvent:
    return TaskStreamEvent(
        kind=kind, worker_id=worker_id, at=time.time(), operation_id=op, detail=detail
    )
