"""Remote workers as real processes: one SIGKILLed mid-attempt (its attempt is failed
after the reconnect grace and retried by a worker on the store, and the run records
one result), and one whose connection is cut (it reconnects within the grace and keeps
its attempt: it runs once)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from pyweft import Engine, Worker, WorkflowContext, workflow
from pyweft.server import ServerAuth, create_app
from pyweft.server.conformance_kit import WORKFLOWS, call_sleep
from pyweft.server.keys import ApiKeyStore
from pyweft.server.task_hub import TaskHub, TaskStreamOptions
from support.node import node_or_skip
from support.poll import eventually

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "server"))
from live import serve_app
from remote_worker_proc import linger

PROC = Path(__file__).parent / "remote_worker_proc.py"


@workflow
async def linger_once(ctx: WorkflowContext, x: int) -> int:
    return await ctx.run(linger, x)


def lines(ledger: Path) -> list[list[str]]:
    if not ledger.exists():
        return []
    return [ln.split() for ln in ledger.read_text().splitlines() if ln.strip()]


def spawn(tmp: Path, url: str, token: str, ledger: Path, name: str) -> subprocess.Popen[bytes]:
    with open(tmp / f"{name}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, str(PROC), url, token, str(ledger)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


@asynccontextmanager
async def serving(tmp: Path, grace_s: float) -> AsyncIterator[tuple[Engine, TaskHub, str, str]]:
    url = f"sqlite:///{tmp / 'remote.db'}"
    async with Engine(url, workflows=[linger_once], serve_queues=[], poll_interval=0.05) as eng:
        _, token = await ApiKeyStore(eng.storage).create(subject="w", scopes=["workers:write"])
        options = TaskStreamOptions(
            reconnect_grace_s=grace_s, heartbeat_interval_s=0.5, poll_interval_s=0.05
        )
        app = create_app(eng, auth=ServerAuth(), task_streams=options)
        async with serve_app(app) as base:
            yield eng, app.state.pyweft_tasks, base, token


async def test_a_sigkilled_remote_worker_s_attempt_is_retried_by_a_store_worker_once(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    async with serving(tmp_path, grace_s=0.5) as (eng, hub, base, token):
        proc = spawn(tmp_path, base, token, ledger, "remote")
        try:
            handle = await eng.start(linger_once, 1, id="killed-mid-attempt")
            await begun(ledger)
            os.kill(proc.pid, signal.SIGKILL)
            await asyncio.to_thread(proc.wait, 10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        async with Worker(
            eng.storage, activities=[linger], queues=["remote"], poll_interval=0.05
        ) as store_worker:
            # The ledger of this process's attempts goes to the same file.
            import remote_worker_proc

            remote_worker_proc._ledger.append(
                os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            )
            assert await handle.result(timeout=30) == 101
            assert store_worker.completed == 1
        history = await eng.history(handle.id)
        (step,) = history.steps
        assert (step.status, step.attempts, step.result) == ("completed", 2, 101)
        ran = lines(ledger)
        remote_pid = str(proc.pid)
        assert [ln[0] for ln in ran if ln[3] == remote_pid] == ["BEGIN"]  # killed midway
        assert [(ln[0], ln[2]) for ln in ran if ln[3] != remote_pid] == [
            ("BEGIN", "2"),
            ("END", "2"),
        ]
        assert any(e.kind == "abandoned" for e in hub.events)


class CuttingProxy:
    """A TCP proxy in front of the server whose connections can be cut at once."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    refusing = False  # while set, new connections are dropped at once

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        for w in self.writers:
            w.transport.abort()
        self.writers = []

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@asynccontextmanager
async def behind_a_proxy(
    tmp: Path, base: str, token: str, ledger: Path
) -> AsyncIterator[tuple[CuttingProxy, subprocess.Popen[bytes]]]:
    """A remote worker process that reaches the server through a :class:`CuttingProxy`;
    on exit it must stop cleanly on SIGTERM (exit 0)."""
    proxy = CuttingProxy(int(base.rsplit(":", 1)[1]))
    port = await proxy.start()
    proc = spawn(tmp, f"http://127.0.0.1:{port}", token, ledger, "remote")
    try:
        yield proxy, proc
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) == 0, (tmp / "remote.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await proxy.close()


async def begun(ledger: Path) -> None:
    await eventually(
        lambda: any(ln[0] == "BEGIN" for ln in lines(ledger)),
        timeout=30,
        what="the remote worker to begin the attempt",
    )


async def test_a_remote_worker_whose_connection_drops_reconnects_and_keeps_its_attempt(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    async with serving(tmp_path, grace_s=5.0) as (eng, hub, base, token):
        async with behind_a_proxy(tmp_path, base, token, ledger) as (proxy, _):
            handle = await eng.start(linger_once, 2, id="cut-mid-attempt")
            await begun(ledger)
            proxy.cut()  # both sides see the connection drop mid-attempt
            resumed = await hub.wait_for(lambda e: e.kind == "resumed", timeout=10)
            assert resumed is not None, (tmp_path / "remote.log").read_text()
            assert len(resumed.detail["kept"]) == 1 and resumed.detail["lost"] == []
            assert await handle.result(timeout=30) == 102
        (step,) = (await eng.history(handle.id)).steps
        assert (step.status, step.attempts) == ("completed", 1)
        assert [(ln[0], ln[2]) for ln in lines(ledger)] == [("BEGIN", "1"), ("END", "1")]
        assert not any(e.kind == "abandoned" for e in hub.events)


async def test_a_worker_that_comes_back_after_the_grace_loses_its_attempt_to_a_retry(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    async with serving(tmp_path, grace_s=0.5) as (eng, hub, base, token):
        async with behind_a_proxy(tmp_path, base, token, ledger) as (proxy, _):
            handle = await eng.start(linger_once, 3, id="back-too-late")
            await begun(ledger)
            proxy.refusing = True
            proxy.cut()
            abandoned = await hub.wait_for(lambda e: e.kind == "abandoned", timeout=10)
            assert abandoned is not None  # the grace passed: attempt 1 failed
            proxy.refusing = False  # the worker gets through with its stale session id
            assert await handle.result(timeout=30) == 103
        (step,) = (await eng.history(handle.id)).steps
        assert (step.status, step.attempts, step.result) == ("completed", 2, 103)
        # Attempt 1 was cancelled on the worker when it came back (no END); attempt 2 ran.
        assert [(ln[0], ln[2]) for ln in lines(ledger)] == [
            ("BEGIN", "1"),
            ("BEGIN", "2"),
            ("END", "2"),
        ]
        assert [e.kind for e in hub.events].count("registered") == 2  # a new session


async def test_the_node_worker_resumes_its_session_after_a_dropped_connection(
    tmp_path: Path,
) -> None:
    node = node_or_skip()
    url = f"sqlite:///{tmp_path / 'node.db'}"
    async with Engine(url, workflows=WORKFLOWS, serve_queues=[], poll_interval=0.05) as eng:
        _, token = await ApiKeyStore(eng.storage).create(subject="w", scopes=["workers:write"])
        options = TaskStreamOptions(
            reconnect_grace_s=5.0, heartbeat_interval_s=0.5, poll_interval_s=0.05
        )
        app = create_app(eng, auth=ServerAuth(), task_streams=options)
        async with serve_app(app) as base:
            hub: TaskHub = app.state.pyweft_tasks
            proxy = CuttingProxy(int(base.rsplit(":", 1)[1]))
            port = await proxy.start()
            env = {
                **os.environ,
                "PYWEFT_WORKER_URL": f"ws://127.0.0.1:{port}/api/v1/tasks/conformance/stream",
                "PYWEFT_WORKER_TOKEN": token,
            }
            proc = spawn_node(tmp_path, node, env)
            try:
                handle = await eng.start(call_sleep, 1500)
                task = await hub.wait_for(lambda e: e.kind == "task", timeout=30)
                assert task is not None, (tmp_path / "node.log").read_text()
                # A heartbeat after it: the worker has read its registerAck and the task.
                mark = list(hub.events).index(task)
                beat = await hub.wait_for(lambda e: e.kind == "heartbeat", timeout=10, since=mark)
                assert beat is not None
                proxy.cut()
                resumed = await hub.wait_for(lambda e: e.kind == "resumed", timeout=10)
                assert resumed is not None, (tmp_path / "node.log").read_text()
                assert resumed.detail["kept"] == [task.operation_id]
                assert await handle.result(timeout=30) == 1500
                proc.send_signal(signal.SIGTERM)
                assert await asyncio.to_thread(proc.wait, 20) == 0
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                await proxy.close()
        (step,) = (await eng.history(handle.id)).steps
        assert (step.status, step.attempts) == ("completed", 1)
        assert not any(e.kind == "abandoned" for e in hub.events)


def spawn_node(tmp: Path, node: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    worker = Path(__file__).parents[2] / "examples" / "node-worker" / "worker.mjs"
    with open(tmp / "node.log", "wb") as log:
        return subprocess.Popen(
            [node, "--experimental-websocket", str(worker)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
