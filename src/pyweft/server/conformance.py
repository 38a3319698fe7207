"""``pyweft conformance -- <command>``: check a remote worker implementation.

The harness starts a real server (uvicorn on 127.0.0.1, API keys required) over an
engine on a temporary SQLite store that runs no activity itself, launches the
worker command with the stream's address and a key in its environment, and runs
the checks of :data:`CHECKS` in order, each against real workflows. A worker under
test implements the three activities of :mod:`.conformance_kit` (``conformance.echo``,
``conformance.sleep``, ``conformance.fail``) on queue ``conformance``.

Environment given to the worker: ``PYWEFT_WORKER_URL`` (the ``ws://`` stream URL),
``PYWEFT_SERVER_URL`` (the ``http://`` base URL), ``PYWEFT_WORKER_TOKEN`` (an API key
with scope ``workers:write``), ``PYWEFT_WORKER_QUEUE``, ``PYWEFT_WORKER_ACTIVITIES``
(comma-separated) and ``PYWEFT_WORKER_PROTOCOL_VERSION``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyweft import Engine, PyweftError
from pyweft.server.app import create_app
from pyweft.server.auth import ServerAuth
from pyweft.server.conformance_kit import (
    ACTIVITY_NAMES,
    ECHO_VALUE,
    QUEUE,
    WORKFLOWS,
    call_echo,
    call_fail,
    call_sleep,
)
from pyweft.server.keys import ApiKeyStore
from pyweft.server.task_hub import TaskHub, TaskStreamOptions
from pyweft.server.task_session import TaskStreamEvent
from pyweft.worker import protocol as p

OPTIONS = TaskStreamOptions(
    reconnect_grace_s=0.5, heartbeat_interval_s=0.5, shutdown_timeout_s=10.0, poll_interval_s=0.1
)


class CheckFailed(Exception):
    """A check saw the worker do something else than the protocol asks."""


@dataclass(kw_only=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    seconds: float


@dataclass(kw_only=True)
class Report:
    command: list[str]
    results: list[CheckResult] = field(default_factory=list)
    worker_log: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "command": self.command,
            "checks": [
                {"name": r.name, "ok": r.ok, "detail": r.detail, "seconds": round(r.seconds, 3)}
                for r in self.results
            ],
        }


class Harness:
    """One conformance run: a server, an engine, and the worker process under test."""

    def __init__(self, command: Sequence[str], *, timeout_s: float, workdir: Path) -> None:
        self.command = list(command)
        self.timeout_s = timeout_s
        self.workdir = workdir
        self.engine: Engine | None = None
        self.hub: TaskHub | None = None
        self.env: dict[str, str] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "worker.log"
        self.worker_id: str | None = None

    # --- plumbing -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        import uvicorn

        db = self.workdir / "conformance.db"
        async with Engine(
            f"sqlite:///{db}", workflows=WORKFLOWS, serve_queues=[], poll_interval=0.1
        ) as engine:
            self.engine = engine
            _, token = await ApiKeyStore(engine.storage).create(
                subject="conformance-worker", scopes=["workers:write"]
            )
            app = create_app(engine, auth=ServerAuth(), task_streams=OPTIONS)
            self.hub = app.state.pyweft_tasks
            # asyncio turns Nagle off (TCP_NODELAY) only on sockets whose proto is TCP: with
            # socket.socket() a frame written right after another waits ~40 ms for an ACK.
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            server = uvicorn.Server(
                uvicorn.Config(app, lifespan="on", log_level="warning", timeout_graceful_shutdown=2)
            )
            serving = asyncio.create_task(server.serve(sockets=[sock]))
            try:
                while not server.started:
                    if serving.done():
                        serving.result()
                    await asyncio.sleep(0.01)
                base = f"http://127.0.0.1:{port}"
                self.env = {
                    "PYWEFT_SERVER_URL": base,
                    "PYWEFT_WORKER_URL": f"ws://127.0.0.1:{port}/api/v1/tasks/{QUEUE}/stream",
                    "PYWEFT_WORKER_TOKEN": token,
                    "PYWEFT_WORKER_QUEUE": QUEUE,
                    "PYWEFT_WORKER_ACTIVITIES": ",".join(ACTIVITY_NAMES),
                    "PYWEFT_WORKER_PROTOCOL_VERSION": str(p.PROTOCOL_VERSION),
                }
                yield
            finally:
                self.kill()
                server.should_exit = True
                await serving
                sock.close()

    def launch(self) -> None:
        env = {**os.environ, **self.env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    async def event(
        self, what: str, match: Callable[[TaskStreamEvent], bool], since: int = 0
    ) -> TaskStreamEvent:
        assert self.hub is not None
        found = await self.hub.wait_for(match, timeout=self.timeout_s, since=since)
        if found is None:
            raise CheckFailed(f"no {what} within {self.timeout_s:g}s")
        return found

    def mark(self) -> int:
        assert self.hub is not None
        return len(self.hub.events)

    async def task_of(self, workflow_id: str, since: int, attempt: int = 1) -> TaskStreamEvent:
        return await self.event(
            f"task frame for run {workflow_id} (attempt {attempt})",
            lambda e: (
                e.kind == "task"
                and e.detail.get("workflow_id") == workflow_id
                and e.detail.get("attempt") == attempt
            ),
            since,
        )

    async def result_of(self, workflow_id: str, timeout: float | None = None) -> Any:
        assert self.engine is not None
        try:
            return await self.engine.result(workflow_id, timeout=timeout or self.timeout_s)
        except PyweftError as exc:
            raise CheckFailed(f"run {workflow_id} ended with {type(exc).__name__}: {exc}") from None

    async def attempts(self, workflow_id: str) -> int:
        assert self.engine is not None
        steps = (await self.engine.history(workflow_id)).steps
        return max((s.attempts for s in steps if s.kind == "activity"), default=0)

    # --- checks -------------------------------------------------------------------------

    async def check_register(self) -> str:
        self.launch()
        ev = await self.event("registration", lambda e: e.kind == "registered")
        assert self.hub is not None
        session = self.hub.sessions.get(ev.worker_id)
        if session is None:
            raise CheckFailed("the worker registered and went away")
        missing = sorted(set(ACTIVITY_NAMES) - session.activities)
        if missing or QUEUE not in session.queues:
            raise CheckFailed(f"registered without {', '.join(missing) or 'queue ' + QUEUE}")
        self.worker_id = ev.worker_id
        return f"worker {ev.worker_id} registered {len(session.activities)} activities"

    async def check_echo(self) -> str:
        assert self.engine is not None
        handle = await self.engine.start(call_echo, ECHO_VALUE)
        got = await self.result_of(handle.id)
        if got != ECHO_VALUE:
            raise CheckFailed(f"echo returned {got!r}, expected {ECHO_VALUE!r}")
        return "the value came back unchanged"

    async def check_failure(self) -> str:
        assert self.engine is not None
        handle = await self.engine.start(call_fail, "deliberate failure")
        try:
            await self.engine.result(handle.id, timeout=self.timeout_s)
        except PyweftError as exc:
            text = str(exc)
            if "deliberate failure" not in text:
                raise CheckFailed(f"the run failed without the worker's message: {text}") from None
        else:
            raise CheckFailed("conformance.fail completed instead of failing")
        tries = await self.attempts(handle.id)
        if tries != 1:
            raise CheckFailed(f"a non-retryable failure was tried {tries} times")
        return "failed once, non-retryable, with the worker's message"

    async def check_heartbeats(self) -> str:
        assert self.engine is not None
        since = self.mark()
        ms = 2500  # more than twice conformance.sleep's 1s visibility timeout
        handle = await self.engine.start(call_sleep, ms)
        task = await self.task_of(handle.id, since)
        got = await self.result_of(handle.id, self.timeout_s + ms / 1000)
        beats = [
            e
            for e in list(self.hub.events if self.hub else [])[since:]
            if e.kind == "heartbeat" and e.worker_id == task.worker_id
        ]
        tries = await self.attempts(handle.id)
        if got != ms or tries != 1:
            raise CheckFailed(f"got {got!r} after {tries} attempts; the claim was not kept")
        if len(beats) < 3:
            raise CheckFailed(f"only {len(beats)} heartbeats during a {ms} ms attempt")
        return f"kept its claim over {ms} ms with {len(beats)} heartbeats"

    async def check_cancellation(self) -> str:
        assert self.engine is not None
        since = self.mark()
        handle = await self.engine.start(call_sleep, 60_000)
        task = await self.task_of(handle.id, since)
        await self.engine.cancel(handle.id)
        await self.event(
            "cancel frame",
            lambda e: e.kind == "cancel" and e.operation_id == task.operation_id,
            since,
        )
        await self.event(
            "cancelled taskResult after the cancel frame",
            lambda e: (
                e.kind == "result"
                and e.operation_id == task.operation_id
                and e.detail.get("status") == "cancelled"
            ),
            since,
        )
        return "the attempt stopped and reported cancelled"

    async def check_reassignment(self) -> str:
        assert self.engine is not None and self.proc is not None
        since = self.mark()
        handle = await self.engine.start(call_sleep, 1500)
        first = await self.task_of(handle.id, since)
        self.kill()  # the worker vanishes mid-attempt
        self.launch()
        second = await self.task_of(handle.id, since, attempt=2)
        got = await self.result_of(handle.id, self.timeout_s + 1.5)
        if got != 1500:
            raise CheckFailed(f"the retried attempt returned {got!r}")
        if second.worker_id == first.worker_id:
            raise CheckFailed("the second attempt went to the same worker id as the killed one")
        self.worker_id = second.worker_id
        return f"attempt 1 on {first.worker_id} failed with it; attempt 2 on {second.worker_id}"

    async def check_shutdown(self) -> str:
        assert self.engine is not None and self.hub is not None and self.proc is not None
        since = self.mark()
        handle = await self.engine.start(call_sleep, 800)
        task = await self.task_of(handle.id, since)
        await self.hub.shutdown(timeout_s=OPTIONS.shutdown_timeout_s, worker_id=task.worker_id)
        stored = [
            e
            for e in list(self.hub.events)[since:]
            if e.kind == "result" and e.operation_id == task.operation_id
        ]
        if not stored or not stored[-1].detail.get("stored"):
            raise CheckFailed("the in-flight attempt was not finished before the worker left")
        got = await self.result_of(handle.id)
        proc = self.proc
        try:
            code = await asyncio.to_thread(proc.wait, self.timeout_s)
        except subprocess.TimeoutExpired:
            raise CheckFailed("the worker process did not exit after shutdown") from None
        if code != 0:
            raise CheckFailed(f"the worker process exited with status {code}")
        return f"finished its attempt ({got!r}), closed the stream and exited 0"


CHECKS: tuple[tuple[str, Callable[[Harness], Awaitable[str]]], ...] = (
    ("register", Harness.check_register),
    ("echo task", Harness.check_echo),
    ("failure", Harness.check_failure),
    ("heartbeats", Harness.check_heartbeats),
    ("cancellation", Harness.check_cancellation),
    ("reassignment after disconnect", Harness.check_reassignment),
    ("graceful shutdown", Harness.check_shutdown),
)


async def run_conformance(command: Sequence[str], *, timeout_s: float = 15.0) -> Report:
    """Run every check against ``command``; a check that fails does not stop the next,
    except that nothing runs after a worker that never registered."""
    report = Report(command=list(command))
    with tempfile.TemporaryDirectory(prefix="pyweft-conformance-") as tmp:
        harness = Harness(command, timeout_s=timeout_s, workdir=Path(tmp))
        async with harness.running():
            for name, check in CHECKS:
                started = time.monotonic()
                try:
                    detail = await check(harness)
                    ok = True
                except CheckFailed as exc:
                    detail, ok = str(exc), False
                except Exception as exc:  # the harness itself: report, do not hide
                    detail, ok = f"{type(exc).__name__}: {exc}", False
                report.results.append(
                    CheckResult(name=name, ok=ok, detail=detail, seconds=time.monotonic() - started)
                )
                if name == "register" and not ok:
                    break
                gone = harness.proc is None or harness.proc.poll() is not None
                if gone and name != "graceful shutdown":
                    harness.launch()  # a crashed worker: give the next check a fresh one
        report.worker_log = harness.log_tail()
    return report
