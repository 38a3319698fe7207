"""``RemoteWorker``: serve activity task queues through a pyweft server's WebSocket.

The same activities as a store :class:`~pyweft.Worker`, with the same activity
context (ids, attempt, fencing tokens, ``heartbeat()``, cancellation, the
activity's ``timeout`` and ``heartbeat_timeout``), but the worker never opens the
store: the server claims attempts in its name and sends them over
``/api/v1/tasks/{queue}/stream`` (docs/guides/remote-workers.md). Arguments and
results travel as JSON.

When the socket drops, the worker keeps running what it has and reconnects with its
session id; within the server's reconnect grace it keeps its attempts, and results
not yet acknowledged are sent again. Stopping (``async with`` exit, ``stop()``,
SIGTERM under ``run()``, or the server's ``shutdown``) drains: no new tasks, in-flight
attempts get ``drain_timeout`` to finish, the rest are reported cancelled and go back
to the queue as the same attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlsplit

from pyweft.codec import DefaultPayloadCodec, PayloadCodec
from pyweft.definitions import Duration
from pyweft.durations import parse_duration
from pyweft.engine.steps.activity_context import ActivityContext
from pyweft.engine.tasks import records as tr
from pyweft.errors import (
    AuthenticationError,
    ConfigurationError,
    PermissionDeniedError,
    PyweftError,
    ServerError,
)
from pyweft.observability.interceptors import Interceptor
from pyweft.observability.worker_side import activity_chain
from pyweft.worker import protocol as p
from pyweft.worker.config import activity_table, check_concurrency, check_queues
from pyweft.worker.runner import run_task

log = logging.getLogger("pyweft.worker")

SDK = "pyweft-python"


def stream_url(url: str, queue: str) -> str:
    """The WebSocket URL of ``queue``'s task stream on the server at ``url`` (an
    ``http(s)://`` base URL, or a ``ws(s)://`` stream URL used as it is)."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise ConfigurationError(
            f"the server URL must be http(s)://host[:port] or a ws(s):// stream URL, got {url!r}"
        )
    path = parts.path.rstrip("/")
    if path.endswith("/stream"):
        return f"{scheme}://{parts.netloc}{path}"
    return f"{scheme}://{parts.netloc}{path}/api/v1/tasks/{quote(queue, safe='')}/stream"


@dataclass(slots=True, eq=False)
class _Job:
    frame: p.Task
    task: asyncio.Task[None] | None = None
    actx: list[ActivityContext] = field(default_factory=list)
    cancel_reason: str | None = None


class RemoteWorker:
    """Serve ``queues`` with ``activities`` through the pyweft server at ``url``.

    ``token``: an API key with scope ``workers:write``. ``concurrency``: attempts run
    at once (over all queues). ``worker_id``: unique among live workers (default:
    host, pid and a random suffix). ``drain_timeout``: how long stopping waits for
    in-flight attempts. ``reconnect_timeout``: how long a dropped connection is
    retried before the worker gives up and stops. ``codec``: turns the JSON arguments
    into the activity's annotated types and its results back (default
    ``DefaultPayloadCodec``).
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        activities: Iterable[Callable[..., Any]],
        queues: Iterable[str] = (tr.DEFAULT_QUEUE,),
        concurrency: int = 8,
        worker_id: str | None = None,
        drain_timeout: Duration = 30.0,
        reconnect_timeout: Duration = 60.0,
        codec: PayloadCodec | None = None,
        interceptors: Iterable[Interceptor] = (),
    ) -> None:
        self.queues = check_queues(queues)
        check_concurrency(concurrency)
        self._activities = activity_table(activities)
        if not self._activities:
            raise ConfigurationError("activities must name at least one @activity function")
        self.url = stream_url(url, self.queues[0])
        self.token = token
        self.concurrency = concurrency
        self.id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.codec: PayloadCodec = codec or DefaultPayloadCodec()
        self._drain_s = parse_duration(drain_timeout, field="drain_timeout")
        self._reconnect_s = parse_duration(reconnect_timeout, field="reconnect_timeout")
        _, self._interceptors = activity_chain(interceptors)
        self.session_id: str | None = None
        self._ws: Any = None
        self._jobs: dict[str, _Job] = {}
        self._unacked: dict[str, p.TaskResult] = {}
        self._beat_s = 5.0
        self._executor: ThreadPoolExecutor | None = None
        self._reader: asyncio.Task[None] | None = None
        self._beater: asyncio.Task[None] | None = None
        self._stopping = False
        self._stop_requested = asyncio.Event()  # what run() waits for
        self._stopped = asyncio.Event()  # set when stop() has finished
        self._shutdown_asked: float | None = None
        self._refusal: str | None = None  # the code of the last registerError
        self._stopper: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self.completed = 0
        self.failed = 0
        self.rejected = 0  # results the server refused (the attempt was no longer ours)
        self.reconnects = 0

    # --- life cycle -------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._jobs)

    @property
    def connected(self) -> bool:
        return self._ws is not None

    async def __aenter__(self) -> RemoteWorker:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Connect and register; raises what the server refused (``AuthenticationError``,
        ``PermissionDeniedError``, ``ConfigurationError``) or ``ServerError``."""
        self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="pyweft-remote")
        deadline = time.monotonic() + self._reconnect_s
        try:
            while True:
                try:
                    await self._connect()
                    break
                except ConfigurationError:
                    # The same id may still be live for a moment: the session of this
                    # worker's previous process, in its reconnect grace. Else it is final.
                    if self._refusal != "duplicate_worker_id" or time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.25)
        except BaseException:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise
        self._reader = asyncio.get_running_loop().create_task(
            self._serve(), name=f"pyweft-remote-worker-{self.id}"
        )
        log.info("remote worker %s serves %s via %s", self.id, ", ".join(self.queues), self.url)

    async def run(self) -> None:
        """Start, serve until SIGTERM/SIGINT or the server's shutdown, then drain and stop."""
        await self.start()
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._stop_requested.set)
                installed.append(sig)
        try:
            await self._stop_requested.wait()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            await self.stop()

    async def stop(self, drain_timeout: Duration | None = None) -> None:
        """Drain: ask for no more tasks, give in-flight attempts up to ``drain_timeout``
        (default: the worker's), report the rest cancelled, then close."""
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        self._stop_requested.set()
        limit = self._drain_s if drain_timeout is None else parse_duration(drain_timeout)
        if self._shutdown_asked is not None:
            limit = min(limit, self._shutdown_asked)
        await self._send(p.Drain())
        running = [j.task for j in self._jobs.values() if j.task is not None]
        if running:
            _, late = await asyncio.wait(running, timeout=limit)
            for job in list(self._jobs.values()):
                if job.task in late:
                    self._cancel_job(job, "the worker is shutting down")
            await asyncio.gather(*late, return_exceptions=True)
        # Give the server a moment to acknowledge the last results.
        deadline = time.monotonic() + 2.0
        while self._unacked and self._ws is not None and time.monotonic() < deadline:
            self._idle.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.1):
                    await self._idle.wait()
        ws, self._ws = self._ws, None
        for task in (self._beater, self._reader):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if ws is not None:
            with contextlib.suppress(Exception):
                await ws.close(code=1000, reason="worker stopped")
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._stopped.set()

    # --- connecting -------------------------------------------------------------------

    async def _connect(self) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            # Frames are small JSON: compressing each costs more CPU than it saves.
            ws = await connect(
                self.url, additional_headers=headers, max_size=None, compression=None
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            text = exc.response.body.decode(errors="replace") if exc.response.body else ""
            if status == 401:
                raise AuthenticationError(f"the server refused the worker's key: {text}") from None
            if status == 403:
                raise PermissionDeniedError(
                    f"the worker's key lacks scope workers:write: {text}",
                    required=["workers:write"],
                ) from None
            raise ServerError(
                f"the task stream answered HTTP {status}: {text}", status=status
            ) from None
        except Exception as exc:  # refused, reset, or not a WebSocket answer
            raise ServerError(
                f"cannot reach the task stream at {self.url}: {type(exc).__name__}: {exc}",
                status=0,
            ) from exc
        held = [
            p.HeldAttempt(operation_id=op, attempt_token=job.frame.attempt_token)
            for op, job in self._jobs.items()
        ] + [
            p.HeldAttempt(operation_id=op, attempt_token=r.attempt_token)
            for op, r in self._unacked.items()
            if op not in self._jobs
        ]
        register = p.Register(
            protocol_version=p.PROTOCOL_VERSION,
            activities=sorted(self._activities),
            concurrency=self.concurrency,
            worker_id=self.id,
            session_id=self.session_id,
            queues=list(self.queues[1:]),
            in_flight=held,
            sdk=SDK,
        )
        try:
            await ws.send(p.encode(register))
            reply = p.decode_server_frame(await ws.recv())
        except Exception as exc:
            with contextlib.suppress(Exception):
                await ws.close()
            raise ServerError(
                f"the task stream closed during registration: {exc}", status=0
            ) from exc
        self._refusal = reply.code if isinstance(reply, p.RegisterError) else None
        if isinstance(reply, p.RegisterError):
            raise ConfigurationError(
                f"the server refused the registration ({reply.code}): {reply.message}"
            )
        if not isinstance(reply, p.RegisterAck):
            raise ServerError(f"expected registerAck, got {type(reply).__name__}", status=0)
        self._ws = ws
        self.session_id = reply.session_id
        self._beat_s = reply.heartbeat_interval_ms / 1000
        resumed = set(reply.resumed)
        for op, job in list(self._jobs.items()):
            if op not in resumed:
                self._cancel_job(job, "the server gave this attempt up while the worker was away")
        for op in list(self._unacked):
            if op not in resumed:
                del self._unacked[op]
            else:
                await self._send(self._unacked[op])
        if self._beater is not None:
            self._beater.cancel()
        self._beater = asyncio.get_running_loop().create_task(self._heartbeats())

    async def _reconnect(self) -> bool:
        deadline = time.monotonic() + self._reconnect_s
        delay = 0.05
        while not self._stopping and time.monotonic() < deadline:
            try:
                before = self.session_id
                await self._connect()
                self.reconnects += 1
                log.info(
                    "remote worker %s reconnected (%s)",
                    self.id,
                    "session kept" if self.session_id == before else "its old session was gone",
                )
                return True
            except (AuthenticationError, PermissionDeniedError):
                raise
            except PyweftError as exc:
                log.info("remote worker %s: reconnecting failed (%s); retrying", self.id, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        return False

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self._beat_s)
            await self._send(p.Heartbeat(worker_id=self.id))

    async def _send(self, frame: Any) -> bool:
        ws = self._ws
        if ws is None:
            return False
        try:
            await ws.send(p.encode(frame))
        except Exception:
            return False
        return True

    # --- serving ----------------------------------------------------------------------

    async def _serve(self) -> None:
        from websockets.exceptions import ConnectionClosed

        while True:
            ws = self._ws
            if ws is None:
                return
            try:
                async for text in ws:
                    await self._on_frame(text)
                closed_cleanly = True
            except ConnectionClosed:
                closed_cleanly = False
            if self._ws is ws:
                self._ws = None
            if self._stopping:
                return
            if closed_cleanly or self._shutdown_asked is not None:
                # The server ended the conversation (shutdown, or a protocol error it
                # logged): nothing to resume.
                log.warning(
                    "remote worker %s: the server closed the stream (%s)", self.id, ws.close_code
                )
                self._stop_requested.set()
                return
            try:
                if not await self._reconnect():
                    log.error("remote worker %s: could not reconnect; stopping", self.id)
                    self._stop_requested.set()
                    return
            except Exception:
                log.exception("remote worker %s: reconnecting failed for good; stopping", self.id)
                self._stop_requested.set()
                return

    async def _on_frame(self, text: str | bytes) -> None:
        try:
            frame = p.decode_server_frame(text)
        except p.FrameError as exc:
            log.warning("remote worker %s ignored a frame it does not know: %s", self.id, exc)
            return
        if isinstance(frame, p.Task):
            self._start(frame)
        elif isinstance(frame, p.Cancel):
            job = self._jobs.get(frame.operation_id)
            if job is not None and job.frame.attempt_token == frame.attempt_token:
                self._cancel_job(job, frame.reason)
        elif isinstance(frame, p.ResultAck | p.ResultRejected):
            sent = self._unacked.get(frame.operation_id)
            if sent is not None and sent.attempt_token == frame.attempt_token:
                del self._unacked[frame.operation_id]
            if isinstance(frame, p.ResultRejected):
                self.rejected += 1
                log.warning(
                    "remote worker %s: the result of %s was refused (%s): %s",
                    self.id,
                    frame.operation_id,
                    frame.code,
                    frame.message,
                )
            if not self._unacked:
                self._idle.set()
        elif isinstance(frame, p.Shutdown):
            self._shutdown_asked = frame.drain_timeout_ms / 1000
            log.info("remote worker %s: the server asks it to stop (%s)", self.id, frame.reason)
            if not self._stopping:  # drain in its own task: this reader still reads acks
                self._stopper = asyncio.get_running_loop().create_task(self.stop())
        elif isinstance(frame, p.ProtocolError):
            log.error("remote worker %s: protocol error %s: %s", self.id, frame.code, frame.message)

    def _start(self, frame: p.Task) -> None:
        job = _Job(frame=frame)
        self._jobs[frame.operation_id] = job
        job.task = asyncio.get_running_loop().create_task(self._run(job))

    def _cancel_job(self, job: _Job, why: str) -> None:
        job.cancel_reason = why
        for actx in job.actx:
            actx.cancel(why)
        if job.task is not None:
            job.task.cancel()

    async def _run(self, job: _Job) -> None:
        frame = job.frame
        try:
            result = await self._attempt(job)
        except asyncio.CancelledError:
            result = p.TaskResult(
                operation_id=frame.operation_id,
                attempt_token=frame.attempt_token,
                status="cancelled",
                error=job.cancel_reason or "cancelled",
            )
        except Exception as exc:  # a bug here, not in the activity: report it as a failure
            log.exception("remote worker %s: task %s broke", self.id, frame.operation_id)
            result = p.TaskResult(
                operation_id=frame.operation_id,
                attempt_token=frame.attempt_token,
                status="failed",
                error=p.TaskError(message=str(exc), type=type(exc).__name__),
            )
        finally:
            self._jobs.pop(frame.operation_id, None)
        if result.status == "completed":
            self.completed += 1
        elif result.status == "failed":
            self.failed += 1
        self._unacked[frame.operation_id] = result
        await self._send(result)

    async def _attempt(self, job: _Job) -> p.TaskResult:
        frame = job.frame
        act = self._activities.get(frame.activity_name)
        op, token = frame.operation_id, frame.attempt_token
        if act is None:
            known = ", ".join(sorted(self._activities))
            return p.TaskResult(
                operation_id=op,
                attempt_token=token,
                status="rejected",
                error=f"worker {self.id!r} has no activity {frame.activity_name!r} (it has: "
                f"{known})",
            )
        now = time.time()
        task = tr.Task(
            id=op,
            queue=frame.queue,
            workflow_id=frame.workflow_id,
            workflow_type=frame.workflow_type,
            activity=frame.activity_name,
            step=frame.step,
            attempt=frame.attempt,
            generation=frame.generation,
            execution_token=frame.execution_token,
            args=self.codec.encode(tuple(frame.input)),
            created_at=now,
            scheduled_at=frame.scheduled_at_ms / 1000,
            ready_key="",
            visibility_s=frame.visibility_timeout_ms / 1000,
            timeout_s=None if frame.timeout_ms is None else frame.timeout_ms / 1000,
            heartbeat_timeout_s=(
                None if frame.heartbeat_timeout_ms is None else frame.heartbeat_timeout_ms / 1000
            ),
            headers=frame.headers,
        )
        assert self._executor is not None
        outcome = await run_task(
            task, act, self.codec, self._executor, now, self.id, job.actx, self._interceptors
        )
        if outcome.ok:
            value = None if outcome.value is None else self.codec.decode(outcome.value)
            return p.TaskResult(
                operation_id=op, attempt_token=token, status="completed", value=value
            )
        err = outcome.error
        kind = outcome.timeout_kind
        return p.TaskResult(
            operation_id=op,
            attempt_token=token,
            status="failed",
            error=p.TaskError(
                message=err.message if err else "the activity failed",
                type=err.type if err else "Error",
                non_retryable=outcome.non_retryable,
                timeout_kind="attempt" if kind == "attempt" else "heartbeat" if kind else None,
                stack=err.traceback if err else None,
            ),
        )
