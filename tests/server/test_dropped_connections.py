"""Clients that drop their TCP connection mid-request, against a real uvicorn server.

Each test opens a raw socket to the server, sends a request (whole, or cut off in its
body), and resets the connection (``SO_LINGER`` 0, so the server sees an RST) before
reading the answer, or in the middle of a streamed one. Then:

* the server is healthy: the next requests are answered;
* nothing leaks: the event journal's count of open feeds, the per-run stream slots
  and the event loop's tasks come back to where they were;
* the operation happened once or not at all: the same start retried with its id or
  idempotency key, or the same signal with its ``signal_id``, converges on one run
  and one delivery.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import uvicorn

from pyweft import Engine, MemoryStorage, SystemClock, Worker, activity
from pyweft.client import Client
from pyweft.server import create_app
from pyweft.server.app import API_PREFIX
from server.conftest import WORKFLOWS
from support.poll import eventually


@activity(queue="media")
async def shrink(x: int) -> int:
    return x // 2


class Served:
    def __init__(self, app: Any, port: int) -> None:
        self.app = app
        self.port = port
        self.base = f"http://127.0.0.1:{port}"

    @property
    def open_feeds(self) -> int:
        return int(self.app.state.pyweft.journal._feeds)

    @property
    def stream_slots(self) -> dict[str, int]:
        return dict(self.app.state.pyweft.slots._open)


@asynccontextmanager
async def serve(engine: Engine, **options: Any) -> AsyncIterator[Served]:
    """Like ``live.live_server``, but also hands back the app, to read its counters."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(engine, **options)
    config = uvicorn.Config(app, lifespan="on", log_level="warning", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield Served(app, port)
    finally:
        server.should_exit = True
        await task
        sock.close()


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    async with Engine(
        MemoryStorage(),
        workflows=WORKFLOWS,
        activities=[shrink],
        clock=SystemClock(),
        poll_interval=0.05,
    ) as eng:
        yield eng


@pytest.fixture
async def served(engine: Engine) -> AsyncIterator[Served]:
    async with serve(engine, max_streams_per_run=2) as s:
        yield s


def _request(
    method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(data)}"]
    if body is not None:
        lines.append("Content-Type: application/json")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


class RawConnection:
    """One TCP connection the test writes to byte by byte and then resets."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> RawConnection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_until(self, marker: bytes, timeout: float = 10.0) -> bytes:
        return await asyncio.wait_for(self.reader.readuntil(marker), timeout)

    def reset(self) -> None:
        """Drop the connection with an RST, as a client that crashed or lost its network."""
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


async def send_and_drop(port: int, data: bytes, *, cut_at: int | None = None) -> None:
    """Send ``data`` (or its first ``cut_at`` bytes) and reset without reading a byte."""
    conn = await RawConnection.open(port)
    await conn.send(data if cut_at is None else data[:cut_at])
    await asyncio.sleep(0.05)  # let the server read what was sent before the reset
    conn.reset()


def _other_tasks() -> set[asyncio.Task[Any]]:
    """The loop's live tasks but this test's and the engine's runs (started on purpose)."""
    current = asyncio.current_task()
    return {
        t
        for t in asyncio.all_tasks()
        if t is not current and not t.done() and not t.get_name().startswith("pyweft-run:")
    }


async def settled_tasks(baseline: set[asyncio.Task[Any]], timeout: float = 10.0) -> None:
    """Every task started since ``baseline`` has ended (the server kept none for us)."""

    def none_left() -> bool:
        return not (_other_tasks() - baseline)

    try:
        await eventually(none_left, timeout=timeout, what="the dropped requests' tasks to end")
    except AssertionError:
        left = sorted(t.get_name() + ": " + repr(t.get_coro()) for t in _other_tasks() - baseline)
        raise AssertionError(f"tasks left behind: {left}") from None


async def healthy(http: httpx.AsyncClient) -> None:
    assert (await http.get(API_PREFIX + "/health")).status_code == 200
    assert (await http.get(API_PREFIX + "/workflows")).status_code == 200


# --- requests dropped before their answer -------------------------------------------------


@pytest.mark.parametrize("cut", ["mid-body", "after-body"])
async def test_a_start_dropped_before_its_answer_happens_at_most_once_and_a_retry_converges(
    served: Served, engine: Engine, cut: str
) -> None:
    async with httpx.AsyncClient(base_url=served.base, timeout=10) as http:
        baseline = _other_tasks()
        by_id = _request("POST", API_PREFIX + "/workflows", {"type": "waits_for_go", "id": "s1"})
        by_key = _request(
            "POST", API_PREFIX + "/workflows", {"type": "waits_for_go", "idempotency_key": "k1"}
        )
        for data in (by_id, by_key):
            await send_and_drop(
                served.port, data, cut_at=len(data) - 5 if cut == "mid-body" else None
            )
        await healthy(http)

        # The same start again: by id it is created or refused as existing, by key it
        # answers with the run the key maps to. Either way there is one run of each.
        again = await http.post(
            API_PREFIX + "/workflows", json={"type": "waits_for_go", "id": "s1"}
        )
        assert again.status_code in (201, 409), again.text
        if again.status_code == 409:
            assert again.json()["error"]["code"] == "WorkflowAlreadyExistsError"
            assert cut == "after-body", "a cut-off body must start nothing"
        keyed = await http.post(
            API_PREFIX + "/workflows", json={"type": "waits_for_go", "idempotency_key": "k1"}
        )
        assert keyed.status_code in (200, 201), keyed.text
        runs = (await engine.list(workflow_type="waits_for_go")).items
        assert sorted(r.id for r in runs) == sorted({"s1", keyed.json()["id"]})
        for run in runs:
            await engine.cancel(run.id)
        await settled_tasks(baseline)


async def test_a_signal_dropped_before_its_answer_is_delivered_once_when_resent_with_its_id(
    served: Served, engine: Engine
) -> None:
    handle = await engine.start("collects_two", id="c")
    async with httpx.AsyncClient(base_url=served.base, timeout=10) as http:
        body = {"payload": "a", "signal_id": "sig-a"}
        await send_and_drop(
            served.port, _request("POST", API_PREFIX + "/workflows/c/signal/item", body)
        )
        await healthy(http)
        resent = await http.post(API_PREFIX + "/workflows/c/signal/item", json=body)
        assert resent.status_code == 200, resent.text
        await http.post(API_PREFIX + "/workflows/c/signal/item", json={"payload": "b"})
    assert await handle.result(timeout=10) == ["a", "b"]


async def test_a_drain_dropped_before_its_answer_leaves_one_consistent_worker_state(
    served: Served, engine: Engine
) -> None:
    async with (
        Worker(
            engine.storage,
            activities=[shrink],
            queues=["media"],
            worker_id="w-1",
            poll_interval=0.05,
        ) as worker,
        httpx.AsyncClient(base_url=served.base, timeout=10) as http,
    ):
        await send_and_drop(served.port, _request("POST", API_PREFIX + "/workers/w-1/drain", {}))
        await healthy(http)
        again = await http.post(API_PREFIX + "/workers/w-1/drain", json={})
        assert again.status_code == 200 and again.json()["drain_requested"] is True
        await worker.heartbeat()
        assert worker.draining
        [row] = (await http.get(API_PREFIX + "/workers")).json()["items"]
        assert row["status"] == "drained"
        await send_and_drop(served.port, _request("POST", API_PREFIX + "/workers/w-1/resume", {}))
        resumed = await http.post(API_PREFIX + "/workers/w-1/resume", json={})
        assert resumed.status_code == 200 and resumed.json()["drain_requested"] is False
        await worker.heartbeat()
        assert not worker.draining


@pytest.mark.parametrize("route", ["rest", "mcp"])
async def test_a_long_poll_dropped_by_its_client_ends_with_it(
    served: Served, engine: Engine, route: str
) -> None:
    if route == "mcp":
        pytest.importorskip("mcp")
    await engine.start("waits_for_go", id="lp")
    async with httpx.AsyncClient(base_url=served.base, timeout=30) as http:
        await healthy(http)
        if route == "mcp":  # the session manager starts on the first MCP request
            listing = {"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {}}
            assert (await http.post("/api/mcp", json=listing, headers=MCP_HEADERS)).is_success
        baseline = _other_tasks()
        for n in range(3):
            if route == "rest":
                data = _request("GET", API_PREFIX + "/workflows/lp/result?wait=30")
            else:
                call = _tool_call(n, "workflow_result", {"workflow_id": "lp", "wait_s": 30})
                data = _request("POST", "/api/mcp", call, MCP_HEADERS)
            await send_and_drop(served.port, data)
        try:
            await settled_tasks(baseline, timeout=5)
        finally:
            await healthy(http)  # served meanwhile, held tasks or not
            await engine.cancel("lp")


async def test_long_polls_dropped_by_their_clients_leave_the_run_to_finish(
    served: Served, engine: Engine
) -> None:
    await engine.start("waits_for_go", id="lp")
    async with httpx.AsyncClient(base_url=served.base, timeout=10) as http:
        await healthy(http)
        baseline = _other_tasks()
        for _ in range(5):
            await send_and_drop(
                served.port, _request("GET", API_PREFIX + "/workflows/lp/result?wait=60")
            )
        await healthy(http)
        await settled_tasks(baseline, timeout=5)  # long before their 60 s
        assert (await engine.describe("lp")).status == "running"  # only the waits ended
        counted = served.app.state.pyweft.metrics.render().decode()
        dropped = 'method="GET",route="/workflows/{workflow_id}/result",status="499"} 5.0'
        assert dropped in counted  # counted as "client closed request", not as errors
        await engine.signal("lp", "go", 1)
        answer = await http.get(API_PREFIX + "/workflows/lp/result", params={"wait": 5})
        assert answer.json()["result"] == {"go": 1}


async def _queued_update(engine: Engine) -> str:
    """An update to a suspended run: stored, not answered until the run resumes."""
    from pyweft import UpdateTimeoutError

    await engine.suspend("lp")
    with pytest.raises(UpdateTimeoutError) as queued:
        await engine.update("lp", "bump", 2, timeout=0.01)
    return queued.value.update_id


@pytest.mark.parametrize("wait", ["update-result", "published-event"])
async def test_other_long_waits_dropped_by_their_clients_end_with_them(
    served: Served, engine: Engine, wait: str
) -> None:
    await engine.start("waits_for_go", id="lp")
    if wait == "update-result":
        update_id = await _queued_update(engine)
        path = f"/updates/{update_id}?wait=30"
    else:
        path = "/workflows/lp/published/never?wait=30"
    async with httpx.AsyncClient(base_url=served.base, timeout=30) as http:
        await healthy(http)
        baseline = _other_tasks()
        for _ in range(3):
            await send_and_drop(served.port, _request("GET", API_PREFIX + path))
        await settled_tasks(baseline, timeout=5)
        await healthy(http)
        if wait == "update-result":
            assert engine._updates is not None and engine._updates._waiters == {}
            await engine.resume("lp")  # the update was only waited for: it still applies
            # not path.replace("30", ...): a hex update id may hold "30" itself
            answer = await http.get(API_PREFIX + f"/updates/{update_id}", params={"wait": 10})
            assert answer.status_code == 200 and answer.json()["result"] == 2, answer.text
    await engine.cancel("lp")


@pytest.mark.parametrize("route", ["rest", "mcp"])
async def test_an_update_dropped_while_it_waits_for_its_answer_is_still_applied(
    served: Served, engine: Engine, route: str
) -> None:
    if route == "mcp":
        pytest.importorskip("mcp")
    await engine.start("waits_for_go", id="lp")
    await engine.suspend("lp")  # the update is stored, answered only once it resumes
    async with httpx.AsyncClient(base_url=served.base, timeout=30) as http:
        await healthy(http)
        if route == "mcp":
            listing = {"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {}}
            assert (await http.post("/api/mcp", json=listing, headers=MCP_HEADERS)).is_success
        baseline = _other_tasks()
        body = {"payload": 2, "timeout": 30, "idempotency_key": "once"}
        if route == "rest":
            data = _request("POST", API_PREFIX + "/workflows/lp/update/bump", body)
        else:
            arguments = {"workflow_id": "lp", "name": "bump", "payload": 2, "wait_s": 30}
            arguments["idempotency_key"] = "once"
            data = _request(
                "POST", "/api/mcp", _tool_call(1, "update_workflow", arguments), MCP_HEADERS
            )
        await send_and_drop(served.port, data)
        await settled_tasks(baseline, timeout=5)
        assert engine._updates is not None and engine._updates._waiters == {}
        await engine.resume("lp")
        again = await http.post(API_PREFIX + "/workflows/lp/update/bump", json=body)
        assert again.status_code == 200 and again.json()["result"] == 2, again.text
        assert await engine.query("lp", "seen") == 2  # applied once
    await engine.cancel("lp")


async def test_a_query_dropped_while_it_waits_for_the_owner_takes_its_question_back() -> None:
    store = MemoryStorage()
    async with Engine(store, workflows=WORKFLOWS, clock=SystemClock(), poll_interval=0.02) as owner:
        await owner.start("waits_for_go", id="q")
        await eventually(lambda: owner.is_running_here("q"), what="the run driven")
    # Nobody drives the run now: a question to it waits for an owner.
    async with (
        Engine(store, workflows=WORKFLOWS, clock=SystemClock(), role="client") as asker,
        serve(asker) as served,
        httpx.AsyncClient(base_url=served.base, timeout=10) as http,
    ):
        await healthy(http)
        baseline = _other_tasks()
        conn = await RawConnection.open(served.port)
        await conn.send(_request("POST", API_PREFIX + "/workflows/q/query/seen", {"timeout": 30}))

        async def asked() -> bool:
            return bool(await store.scan("qry:"))

        await eventually(asked, what="the question stored")
        conn.reset()
        await settled_tasks(baseline, timeout=5)
        assert await store.scan("qry:") == [] and await store.scan("qrs:") == []
        await healthy(http)


# --- streams dropped mid-answer -----------------------------------------------------------


async def test_event_feeds_dropped_mid_stream_give_back_their_slots(
    served: Served, engine: Engine
) -> None:
    await engine.start("waits_for_go", id="f")
    async with httpx.AsyncClient(base_url=served.base, timeout=10) as http:
        await healthy(http)
        baseline = _other_tasks()
        # More drops than the run's two stream slots: a leaked slot would refuse the next.
        for path in ["/events/sse", *["/workflows/f/events/sse"] * 4]:
            conn = await RawConnection.open(served.port)
            await conn.send(_request("GET", API_PREFIX + path))
            await conn.read_until(b": connected")
            assert served.open_feeds >= 1
            conn.reset()
            # The feed closes first; its response gives the slot back as it ends, after.
            await eventually(
                lambda: served.open_feeds == 0 and served.stream_slots == {},
                what="the feed to close and give its slot back",
            )
        await engine.signal("f", "go", 1)  # events flow to no one: nothing to write to
        await settled_tasks(baseline)
        async with http.stream("GET", API_PREFIX + "/workflows/f/events/sse") as resp:
            assert resp.status_code == 200
            lines = resp.aiter_lines()
            assert await anext(lines) == ": connected"
        await healthy(http)


# --- MCP over Streamable HTTP ------------------------------------------------------------

MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def _tool_call(call_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": call_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


async def test_an_mcp_tool_call_dropped_before_its_answer_leaves_the_server_healthy(
    served: Served, engine: Engine
) -> None:
    pytest.importorskip("mcp")
    async with httpx.AsyncClient(base_url=served.base, timeout=30) as http:
        # Warm the session manager up first: it starts on the first MCP request.
        listed = await http.post(
            "/api/mcp",
            json={"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {}},
            headers=MCP_HEADERS,
        )
        assert listed.status_code == 200, listed.text
        baseline = _other_tasks()
        start = _tool_call(1, "start_workflow", {"type": "waits_for_go", "id": "m1"})
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        for body in (start, listing, start):
            data = _request("POST", "/api/mcp", body, MCP_HEADERS)
            await send_and_drop(served.port, data)
        await settled_tasks(baseline)
        await healthy(http)

        again = await http.post("/api/mcp", json=start, headers=MCP_HEADERS)
        assert again.status_code == 200, again.text
        answer = again.json()["result"]
        assert answer["isError"] is True  # the dropped call did start it: one run
        assert "WorkflowAlreadyExistsError" in json.dumps(answer)
        assert [r.id for r in (await engine.list()).items] == ["m1"]
    await engine.cancel("m1")


# --- the HTTP client through a connection that drops the answer --------------------------


class DroppingProxy:
    """A TCP proxy that forwards each request whole and, while ``drops`` > 0, resets the
    client's connection when the server's answer starts instead of forwarding it: the
    request was handled, the answer is lost."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.drops = 0
        self.dropped = 0
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> DroppingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        client = RawConnection(reader, writer)

        async def pump_up() -> None:
            with _quiet():
                while data := await reader.read(65536):
                    up_writer.write(data)
                    await up_writer.drain()

        upward = asyncio.create_task(pump_up())
        try:
            while data := await up_reader.read(65536):
                if self.drops > 0:
                    self.drops -= 1
                    self.dropped += 1
                    client.reset()
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            upward.cancel()
            up_writer.close()
            writer.close()


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> bool:
        return isinstance(exc, ConnectionError | OSError)


async def test_the_client_retries_idempotent_calls_whose_answer_was_dropped(
    served: Served, engine: Engine
) -> None:
    handle = await engine.start("collects_two", id="c")
    async with (
        DroppingProxy(served.port) as proxy,
        Client(f"http://127.0.0.1:{proxy.port}", backoff_s=0.01) as client,
    ):
        proxy.drops = 1
        await client.signal("c", "item", "a", signal_id="s-a")  # answer dropped, resent
        assert proxy.dropped == 1
        proxy.drops = 1
        started = await client.start("waits_for_go", idempotency_key="once")
        assert proxy.dropped == 2
        await client.signal("c", "item", "b", signal_id="s-b")
        assert await handle.result(timeout=10) == ["a", "b"]
        keyed = [r for r in (await engine.list(workflow_type="waits_for_go")).items]
        assert [r.id for r in keyed] == [started.id]
        await engine.cancel(started.id)


async def test_the_client_retries_a_drain_whose_answer_was_dropped(
    served: Served, engine: Engine
) -> None:
    async with (
        Worker(engine.storage, activities=[shrink], queues=["media"], worker_id="w-2") as worker,
        DroppingProxy(served.port) as proxy,
        Client(f"http://127.0.0.1:{proxy.port}", backoff_s=0.01) as client,
    ):
        proxy.drops = 1
        info = await client.drain_worker("w-2")
        assert proxy.dropped == 1 and info is not None and info.drain_requested
        proxy.drops = 1
        info = await client.resume_worker("w-2")
        assert proxy.dropped == 2 and info is not None and not info.drain_requested
        await worker.heartbeat()
        assert not worker.draining


# --- a bulk commit dropped before its answer, with a storage fault on the way -----------


async def test_a_bulk_commit_dropped_mid_request_is_finished_by_the_same_token() -> None:
    from pyweft.engine.replay import keys
    from pyweft.storage.base import Put
    from pyweft.testing import FaultyStorage

    store = FaultyStorage(MemoryStorage())
    async with (
        Engine(store, workflows=WORKFLOWS, clock=SystemClock()) as engine,
        serve(engine) as served,
        httpx.AsyncClient(base_url=served.base, timeout=10) as http,
    ):
        for i in range(3):
            await engine.start("collects_two", id=f"bk-{i}")
        body: dict[str, Any] = {
            "filter": {"workflow_type": "collects_two"},
            "signal": {"name": "item", "payload": "x"},
        }
        dry = (await http.post(API_PREFIX + "/bulk/signal", json=body)).json()
        commit = {**body, "dry_run": False, "confirmation_token": dry["confirmation_token"]}
        seq = keys.signal_seq("bk-1")

        def signal_to_bk1(ops: Any) -> bool:
            return any(isinstance(op, Put) and op.key == seq for op in ops)

        # bk-1's signal lands but its reply is lost; the caller is gone before the answer.
        store.fail_nth_write(match=signal_to_bk1, outcome_unknown=True)
        await send_and_drop(served.port, _request("POST", API_PREFIX + "/bulk/signal", commit))
        await eventually(lambda: store.counts.lost_replies == 1, what="the fault to fire")

        async def audited() -> bool:
            items = (await http.get(API_PREFIX + "/bulk/audit")).json()["items"]
            return len(items) == 1

        await eventually(audited, what="the dropped commit's audit record")
        [partial] = (await http.get(API_PREFIX + "/bulk/audit")).json()["items"]
        assert (partial["applied"], partial["failed"]) == (2, 1)
        again = await http.post(API_PREFIX + "/bulk/signal", json=commit)
        assert again.status_code == 200, again.text
        assert (again.json()["applied"], again.json()["failed"]) == (3, {})
        spent = await http.post(API_PREFIX + "/bulk/signal", json=commit)
        assert spent.status_code == 409 and "already spent" in spent.json()["error"]["message"]
        [audit] = (await http.get(API_PREFIX + "/bulk/audit")).json()["items"]
        assert (audit["audit_id"], audit["applied"], audit["failed"]) == (
            again.json()["audit_id"],
            3,
            0,
        )
        for i in range(3):
            await engine.signal(f"bk-{i}", "item", "y")
            assert await engine.get_handle(f"bk-{i}").result(timeout=10) == ["x", "y"]


# --- a real `pyweft serve` process ----------------------------------------------------------


def _drop_sync(port: int, data: bytes, *, read_until: bytes | None = None) -> None:
    import time

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        if read_until is not None:
            seen = b""
            while read_until not in seen:
                chunk = sock.recv(4096)
                assert chunk, "the server closed the stream first"
                seen += chunk
        else:
            time.sleep(0.05)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_a_served_process_survives_dropped_clients_and_still_shuts_down_at_once(
    tmp_path: Any,
) -> None:
    import signal as signals
    import subprocess
    import time

    from server.test_serve_process import APP, free_port, spawn, wait_up

    (tmp_path / "servedapp.py").write_text(APP.replace("{db}", str(tmp_path / "app.db")))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # A grace period far longer than the test: a feed or request the server kept for a
    # dropped client would hold the shutdown up.
    proc = spawn(tmp_path, "--port", str(port), "--graceful-timeout", "600")
    try:
        wait_up(url, proc)
        start = {"type": "add_three", "args": [1], "idempotency_key": "once"}
        for _ in range(3):
            _drop_sync(port, _request("POST", API_PREFIX + "/workflows", start))
            _drop_sync(port, _request("GET", API_PREFIX + "/events/sse"), read_until=b"connected")
        again = httpx.post(url + API_PREFIX + "/workflows", json=start, timeout=10)
        assert again.status_code in (200, 201), again.text
        run_id = again.json()["id"]
        runs = httpx.get(url + API_PREFIX + "/workflows", timeout=10).json()["items"]
        assert [r["id"] for r in runs] == [run_id]
        result = httpx.get(
            f"{url}{API_PREFIX}/workflows/{run_id}/result", params={"wait": 20}, timeout=30
        )
        assert result.json()["result"] == 4
    finally:
        stopped_at = time.monotonic()
        proc.send_signal(signals.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError("the server did not shut down: something held it") from None
    assert proc.returncode == 0, err.decode()
    assert time.monotonic() - stopped_at < 30


def test_requests_buffered_while_the_server_was_paused_by_clients_that_gave_up_are_harmless(
    tmp_path: Any,
) -> None:
    import signal as signals

    from server.test_serve_process import APP, free_port, spawn, wait_up

    (tmp_path / "servedapp.py").write_text(APP.replace("{db}", str(tmp_path / "app.db")))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = spawn(tmp_path, "--port", str(port), "--graceful-timeout", "600")
    try:
        wait_up(url, proc)
        start = {"type": "add_three", "args": [1], "idempotency_key": "paused"}
        proc.send_signal(signals.SIGSTOP)  # the kernel still accepts and buffers requests
        try:
            for _ in range(3):
                with pytest.raises(httpx.TimeoutException):
                    httpx.post(url + API_PREFIX + "/workflows", json=start, timeout=0.5)
            with pytest.raises(httpx.TimeoutException):
                httpx.get(url + API_PREFIX + "/events/sse", timeout=0.5)
        finally:
            proc.send_signal(signals.SIGCONT)
        # The server now reads requests whose clients left; it answers into closed sockets.
        again = httpx.post(url + API_PREFIX + "/workflows", json=start, timeout=30)
        assert again.status_code in (200, 201), again.text
        runs = httpx.get(url + API_PREFIX + "/workflows", timeout=10).json()["items"]
        assert [r["id"] for r in runs] == [again.json()["id"]]
        done = httpx.get(
            f"{url}{API_PREFIX}/workflows/{again.json()['id']}/result",
            params={"wait": 20},
            timeout=30,
        )
        assert done.json()["result"] == 4
    finally:
        if proc.poll() is None:
            proc.send_signal(signals.SIGCONT)
            proc.send_signal(signals.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
