"""``TaskHub``: every remote worker session of one server, and the loop that keeps them.

The hub registers sockets (new sessions, or a reconnect taking over a session in
its grace), listens once for "a task was queued" and wakes the sessions, and ticks:
each tick every session notices withdrawn attempts (sent ``cancel``), extends due
claims, closes sockets whose worker stopped heartbeating, writes liveness records
(so ``engine.workers()`` and ``pyweft workers list`` show remote workers too), and
the hub fails the attempts of any worker whose claims expired. ``shutdown`` asks
every worker to finish and close, then hands back what is left as the same attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.websockets import WebSocket

from pyweft import ConfigurationError, Engine
from pyweft.engine.tasks.broker import TaskBroker
from pyweft.engine.tasks.doorbell import Unlisten
from pyweft.server.task_session import Session, TaskStreamEvent, new_event
from pyweft.worker import protocol as p

log = logging.getLogger("pyweft.server.tasks")


@dataclass(frozen=True, kw_only=True)
class TaskStreamOptions:
    """How the server treats remote workers (``create_app(..., task_streams=...)``).

    ``reconnect_grace_s`` (default 2, at most 300): how long a dropped worker's attempts
    wait for it to reconnect before they are failed and retried elsewhere.
    ``heartbeat_interval_s`` (default 5): how often workers are told to heartbeat; a
    socket silent for three intervals is closed. ``shutdown_timeout_s`` (default 30):
    how long a server shutdown waits for workers to finish. ``max_frame_bytes``
    (default 1 MiB): larger frames are refused before parsing. ``poll_interval_s``
    (default 1): how often sessions look for tasks when no notification came.
    """

    reconnect_grace_s: float = 2.0
    heartbeat_interval_s: float = 5.0
    shutdown_timeout_s: float = 30.0
    max_frame_bytes: int = 1024 * 1024
    poll_interval_s: float = 1.0

    def validate(self) -> None:
        checks = (
            ("reconnect_grace_s", self.reconnect_grace_s, 0.0, 300.0),
            ("heartbeat_interval_s", self.heartbeat_interval_s, 0.01, 600.0),
            ("shutdown_timeout_s", self.shutdown_timeout_s, 0.0, 3600.0),
            ("poll_interval_s", self.poll_interval_s, 0.001, 60.0),
        )
        for name, value, low, high in checks:
            if not isinstance(value, int | float) or not low <= value <= high:
                raise ConfigurationError(
                    f"TaskStreamOptions.{name} must be a number of seconds in [{low:g}, "
                    f"{high:g}], got {value!r}"
                )
        if type(self.max_frame_bytes) is not int or self.max_frame_bytes < 1024:
            raise ConfigurationError(
                f"TaskStreamOptions.max_frame_bytes must be an int >= 1024, got "
                f"{self.max_frame_bytes!r}"
            )


class TaskHub:
    """The remote worker sessions of one server app."""

    def __init__(self, engine: Engine, options: TaskStreamOptions) -> None:
        options.validate()
        self.engine = engine
        self.options = options
        self._broker: TaskBroker | None = None
        self.sessions: dict[str, Session] = {}  # by worker id
        self._by_session: dict[str, Session] = {}
        self.events: deque[TaskStreamEvent] = deque(maxlen=20_000)
        self._changed = asyncio.Event()
        self._observers: list[Callable[[TaskStreamEvent], None]] = []
        self._loop_task: asyncio.Task[None] | None = None
        self._unlisten: Unlisten | None = None
        self._reaped_at = 0.0
        self.closing = False

    @property
    def broker(self) -> TaskBroker:
        if self._broker is None:
            self._broker = self.engine.task_broker()
        return self._broker

    # --- events -----------------------------------------------------------------------

    def emit(self, kind: str, worker_id: str, op: str | None = None, **detail: Any) -> None:
        event = new_event(kind, worker_id, op, detail)
        self.events.append(event)
        for observer in self._observers:
            observer(event)
        self._changed.set()

    def observe(self, callback: Callable[[TaskStreamEvent], None]) -> None:
        self._observers.append(callback)

    async def wait_for(
        self, match: Callable[[TaskStreamEvent], bool], *, timeout: float, since: int = 0
    ) -> TaskStreamEvent | None:
        """The first event from index ``since`` on that matches, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        seen = since
        while True:
            events = list(self.events)
            for event in events[seen:]:
                if match(event):
                    return event
            seen = len(events)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, 0.2)):
                    await self._changed.wait()

    # --- life cycle -------------------------------------------------------------------

    async def _ensure_started(self) -> None:
        if self._loop_task is None:
            self._unlisten = await self.broker.listen_for_tasks(self._wake_all)
            self._loop_task = asyncio.get_running_loop().create_task(
                self._tick_loop(), name="pyweft-task-streams"
            )

    def _wake_all(self) -> None:
        for session in self.sessions.values():
            session.kick()

    async def close(self) -> None:
        """Shut down every worker (see :meth:`shutdown`), then stop the hub's loop."""
        await self.shutdown(timeout_s=self.options.shutdown_timeout_s, reason="server stopping")
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        unlisten, self._unlisten = self._unlisten, None
        if unlisten is not None:
            await unlisten()

    async def shutdown(
        self, *, timeout_s: float, reason: str = "server stopping", worker_id: str | None = None
    ) -> None:
        """Ask workers (all, or ``worker_id``) to finish what they run within ``timeout_s``
        and close; what is still held then goes back to the queue as the same attempt."""
        if worker_id is None:
            self.closing = True
        targets = [
            s for s in self.sessions.values() if worker_id is None or s.worker_id == worker_id
        ]
        for s in targets:
            s.shutting_down = True
            self.emit("shutdown", s.worker_id, reason=reason)
            if not s.attached:  # gone already, and no reconnect is accepted now
                await s.end(f"worker {s.worker_id!r} was disconnected at {reason}", hand_back=False)
                continue
            await s.send(p.Shutdown(reason=reason, drain_timeout_ms=round(timeout_s * 1000)))
        waits = [asyncio.ensure_future(s.ended_event.wait()) for s in targets]
        if waits:
            await asyncio.wait(waits, timeout=timeout_s + 1.0)  # the drain, then the close
            for w in waits:
                w.cancel()
        for s in targets:
            if not s.ended:
                await s.close(1001, "server shutting down")
                await s.end("the server shut down before the worker finished", hand_back=True)

    # --- registration -----------------------------------------------------------------

    async def register(
        self, ws: WebSocket, frame: p.Register, *, subject: str, path_queue: str, peer: str | None
    ) -> Session | None:
        """Attach ``ws`` to a new or resumed session and send ``registerAck``; or send
        ``registerError``, close the socket (1008) and return ``None``."""
        await self._ensure_started()

        async def refuse(code: Any, message: str) -> None:
            await self.refuse(ws, code, message, requested=frame.protocol_version)

        if frame.protocol_version not in p.SUPPORTED_VERSIONS:
            await refuse(
                "unsupported_protocol_version",
                f"protocol version {frame.protocol_version} is not supported; this server "
                f"speaks {', '.join(map(str, p.SUPPORTED_VERSIONS))}",
            )
            return None
        if self.closing:
            await refuse("invalid_registration", "the server is shutting down")
            return None
        session = self._by_session.get(frame.session_id or "")
        if session is not None and (
            session.ended
            or session.subject != subject
            or (frame.worker_id is not None and frame.worker_id != session.worker_id)
        ):
            session = None
        if session is not None:
            session.cancel_grace()  # before any await: the grace must not end it meanwhile
            if not session.ended:
                return await self._resume(session, ws, frame, path_queue)
        worker_id = frame.worker_id or f"remote-{secrets.token_hex(6)}"
        if worker_id in self.sessions or worker_id in await self.broker.live_worker_ids():
            await refuse(
                "duplicate_worker_id",
                f"a live worker already has the id {worker_id!r}; give each worker its own "
                "id (or reconnect with the sessionId of its registerAck)",
            )
            return None
        session = Session(
            self,
            worker_id=worker_id,
            session_id=secrets.token_urlsafe(24),
            subject=subject,
            peer=peer,
        )
        session.configure(frame, path_queue)
        self.sessions[worker_id] = session
        self._by_session[session.session_id] = session
        session.ws = ws
        await session.write_record()
        await self._ack(session, [])
        # What the worker says it runs belongs to no session here: stop it there.
        for a in frame.in_flight:
            await session.send(
                p.Cancel(
                    operation_id=a.operation_id,
                    attempt_token=a.attempt_token,
                    reason="its session is gone (the reconnect grace passed); the attempt "
                    "was given up",
                )
            )
        session.attach(ws)
        self.emit("registered", worker_id, queues=list(session.queues), sdk=frame.sdk)
        return session

    async def refuse(
        self, ws: WebSocket, code: Any, message: str, *, requested: int | None = None
    ) -> None:
        """Send ``registerError`` and close the socket with 1008."""
        with contextlib.suppress(Exception):
            await ws.send_text(
                p.encode(
                    p.RegisterError(
                        code=code,
                        message=message,
                        supported_protocol_versions=list(p.SUPPORTED_VERSIONS),
                        requested_protocol_version=requested,
                    )
                )
            )
            await ws.close(code=1008, reason=code)

    async def _resume(
        self, session: Session, ws: WebSocket, frame: p.Register, path_queue: str
    ) -> Session:
        old = session.ws
        if old is not None:  # a half-open socket the worker gave up on: replaced
            await session.detach_for_takeover()
            with contextlib.suppress(Exception):
                await old.close(code=1008, reason="replaced by a reconnect")
        session.configure(frame, path_queue)
        async with session.lock:
            kept, cancel, lost = session.resume(frame)
            for held in lost:
                await session.broker.abandon(
                    held,
                    f"worker {session.worker_id!r} reconnected without it (it no longer ran it)",
                )
        session.ws = ws
        await self._ack(session, kept)
        for op, token in cancel:
            await session.send(
                p.Cancel(
                    operation_id=op,
                    attempt_token=token,
                    reason="the attempt was lost while the worker was away",
                )
            )
        session.attach(ws)
        self.emit("resumed", session.worker_id, kept=kept, lost=[h.id for h in lost])
        return session

    async def _ack(self, session: Session, resumed: list[str]) -> None:
        await session.send(
            p.RegisterAck(
                protocol_version=p.PROTOCOL_VERSION,
                worker_id=session.worker_id,
                session_id=session.session_id,
                queues=list(session.queues),
                activities=sorted(session.activities),
                concurrency=session.concurrency,
                heartbeat_interval_ms=round(self.options.heartbeat_interval_s * 1000),
                reconnect_grace_ms=round(self.options.reconnect_grace_s * 1000),
                resumed=resumed,
            )
        )

    def forget(self, session: Session) -> None:
        if self.sessions.get(session.worker_id) is session:
            del self.sessions[session.worker_id]
        if self._by_session.get(session.session_id) is session:
            del self._by_session[session.session_id]

    async def detach(self, session: Session, ws: WebSocket) -> None:
        await session.detach(ws, self.options.reconnect_grace_s)

    # --- the tick -----------------------------------------------------------------------

    def _tick_s(self) -> float:
        floors = [s.visibility_floor() for s in self.sessions.values()]
        vis = [f / 3 for f in floors if f is not None]
        return max(0.01, min([self.options.heartbeat_interval_s, 1.0, *vis]))

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self._tick_s())
            try:
                await self.tick()
            except Exception:
                log.exception("keeping the remote workers' claims failed; retrying")

    async def tick(self) -> None:
        opts = self.options
        for session in list(self.sessions.values()):
            try:
                await self._keep(session)
            except Exception:  # one session's trouble (a store error) spares the others
                log.exception("keeping the claims of remote worker %s failed", session.worker_id)
        now = time.monotonic()
        if now - self._reaped_at >= opts.poll_interval_s:
            self._reaped_at = now
            await self.broker.reap()

    async def _keep(self, session: Session) -> None:
        opts = self.options
        if not session.ended:
            if session.attached and session.silent_for() > 3 * opts.heartbeat_interval_s:
                await session.send(
                    p.ProtocolError(
                        code="heartbeat_timeout",
                        message=f"no heartbeat for {session.silent_for():.1f}s (the interval "
                        f"is {opts.heartbeat_interval_s:g}s)",
                    )
                )
                await session.close(1002, "heartbeat_timeout")
            await session.keep()
            if time.monotonic() - session.last_record >= opts.heartbeat_interval_s:
                await session.write_record()
