"""The task stream over a real socket: auth at the upgrade, bad frames, fencing of
results, refusals, reconnects within the grace, drain; with hand-made frames."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from pyweft import Worker
from pyweft.engine.tasks import records as tr
from support.poll import eventually

from .task_stream_kit import QUEUE, Served, call_echo, echo, raw, served


@pytest.fixture
async def srv(tmp_path: Path) -> Served:  # type: ignore[misc]
    async with served(tmp_path) as s:
        yield s


async def status_of_upgrade(url: str, headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    with pytest.raises(InvalidStatus) as err:
        async with connect(url, additional_headers=headers):
            pass
    response = err.value.response
    return response.status_code, json.loads(response.body or b"{}")


async def test_an_upgrade_without_a_credential_is_answered_401(srv: Served) -> None:
    status, body = await status_of_upgrade(srv.stream(), {})
    assert status == 401
    assert body["error"]["code"] == "AuthenticationError"  # type: ignore[index]


async def test_an_upgrade_with_a_key_lacking_workers_write_is_answered_403(srv: Served) -> None:
    status, body = await status_of_upgrade(
        srv.stream(), {"Authorization": f"Bearer {srv.reader_token}"}
    )
    assert status == 403
    assert body["error"]["details"]["required"] == ["workers:write"]  # type: ignore[index]


async def test_an_unknown_key_is_answered_401(srv: Served) -> None:
    status, _ = await status_of_upgrade(srv.stream(), {"X-API-Key": "pwk_nope_nope"})
    assert status == 401


async def test_a_bad_queue_name_is_answered_400(srv: Served) -> None:
    status, body = await status_of_upgrade(
        srv.stream("bad.queue"), {"Authorization": f"Bearer {srv.token}"}
    )
    assert status == 400
    assert body["error"]["code"] == "InvalidArgumentError"  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("{not json", "invalid_json"),
        ('{"type": "subscribe"}', "unknown_message_type"),
        ('{"type": "heartbeat"}', "registration_required"),
    ],
)
async def test_a_bad_first_frame_gets_a_protocol_error_and_close_1002(
    srv: Served, text: str, code: str
) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.ws.send(text)
        frame = await w.recv()
        assert frame == {"type": "protocolError", "code": code, "message": frame["message"]}
        assert await w.closed() == 1002
    assert srv.hub.sessions == {}
    assert await srv.engine.workers(include_gone=True) == []  # nothing was registered


@pytest.mark.parametrize(
    "register",
    [
        {"protocolVersion": 1, "activities": []},
        {"protocolVersion": 1, "activities": ["a"], "concurrency": 0},
        {"protocolVersion": 1, "activities": ["a"], "x": 1},
        {"activities": ["a"]},
    ],
)
async def test_a_malformed_register_gets_register_error_and_close_1008(
    srv: Served, register: dict[str, object]
) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.send(type="register", **register)
        frame = await w.recv()
        assert (frame["type"], frame["code"]) == ("registerError", "invalid_registration")
        assert frame["supportedProtocolVersions"] == [1]
        assert await w.closed() == 1008
    assert srv.hub.sessions == {}
    assert await srv.engine.workers(include_gone=True) == []


async def test_a_binary_frame_is_a_protocol_error(srv: Served) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.ws.send(b'{"type": "heartbeat"}')
        assert (await w.recv())["code"] == "invalid_message"
        assert await w.closed() == 1002


async def test_an_oversized_frame_is_refused_before_parsing_with_1009(srv: Served) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.ws.send('{"type": "register", "sdk": "' + "x" * (1024 * 1024 + 10) + '"}')
        assert (await w.recv())["code"] == "frame_too_large"
        assert await w.closed() == 1009


async def test_an_unsupported_protocol_version_gets_register_error_and_1008(srv: Served) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.send(type="register", protocolVersion=2, activities=["echo"])
        frame = await w.recv()
        assert frame["type"] == "registerError"
        assert frame["code"] == "unsupported_protocol_version"
        assert frame["supportedProtocolVersions"] == [1]
        assert frame["requestedProtocolVersion"] == 2
        assert await w.closed() == 1008


async def test_a_second_register_on_one_socket_is_a_protocol_error(srv: Served) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.register(["echo"])
        await w.send(type="register", protocolVersion=1, activities=["echo"])
        assert (await w.expect("protocolError"))["code"] == "already_registered"
        assert await w.closed() == 1002


async def test_a_duplicate_live_worker_id_is_refused(srv: Served) -> None:
    async with raw(srv.stream(), srv.token) as a, raw(srv.stream(), srv.token) as b:
        await a.register(["echo"], workerId="same-id")
        await b.send(type="register", protocolVersion=1, activities=["echo"], workerId="same-id")
        frame = await b.recv()
        assert (frame["type"], frame["code"]) == ("registerError", "duplicate_worker_id")
        assert await b.closed() == 1008


async def test_the_task_frame_carries_the_attempt_and_a_completed_result_is_stored(
    srv: Served,
) -> None:
    async with raw(srv.stream(), srv.token) as w:
        ack = await w.register(["echo"], concurrency=2)
        assert ack["queues"] == [QUEUE] and ack["concurrency"] == 2
        assert ack["heartbeatIntervalMs"] == 500 and ack["reconnectGraceMs"] == 1000
        handle = await srv.engine.start(call_echo, {"a": [1, "b"]})
        task = await w.task()
        assert task["activityName"] == "echo"
        assert task["input"] == [{"a": [1, "b"]}]
        assert (task["attempt"], task["workflowId"], task["queue"]) == (1, handle.id, QUEUE)
        assert task["visibilityTimeoutMs"] == 30_000
        await w.reply(task, "completed", value={"done": True})
        ack2 = await w.expect("resultAck")
        assert ack2["operationId"] == task["operationId"]
        assert await handle.result(timeout=5) == {"done": True}


async def test_a_result_with_the_wrong_token_is_refused_and_nothing_is_stored(srv: Served) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.register(["echo"])
        handle = await srv.engine.start(call_echo, 1)
        task = await w.task()
        await w.send(
            type="taskResult",
            operationId=task["operationId"],
            attemptToken="not-the-token",
            status="completed",
            value="forged",
        )
        refused = await w.expect("resultRejected")
        assert refused["code"] == "stale"
        assert await srv.results_stored() == []
        raw_task = await srv.engine.storage.get(tr.task_key(task["operationId"]))
        assert raw_task is not None  # still held, by this worker
        await w.reply(task, "completed", value="real")
        await w.expect("resultAck")
        assert await handle.result(timeout=5) == "real"


async def test_a_malformed_result_closes_the_socket_and_stores_nothing_and_a_reconnect_resumes(
    srv: Served,
) -> None:
    async with raw(srv.stream(), srv.token) as w:
        ack = await w.register(["echo"], workerId="resumer")
        handle = await srv.engine.start(call_echo, 7)
        task = await w.task()
        await w.reply(task, "failed", error={"type": "NoMessage"})  # message is required
        assert (await w.expect("protocolError"))["code"] == "invalid_message"
        assert await w.closed() == 1002
    assert await srv.results_stored() == []
    # Within the grace, the same session takes its attempt back.
    async with raw(srv.stream(), srv.token) as w2:
        held = [{"operationId": task["operationId"], "attemptToken": task["attemptToken"]}]
        ack2 = await w2.register(
            ["echo"], workerId="resumer", sessionId=ack["sessionId"], inFlight=held
        )
        assert ack2["sessionId"] == ack["sessionId"]
        assert ack2["resumed"] == [task["operationId"]]
        await w2.reply(task, "completed", value=8)
        await w2.expect("resultAck")
    assert await handle.result(timeout=5) == 8
    history = await srv.engine.history(handle.id)
    assert [s.attempts for s in history.steps] == [1]


async def test_after_the_grace_the_attempt_fails_and_is_retried_by_a_store_worker(
    srv: Served,
) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.register(["echo"], workerId="vanishing")
        handle = await srv.engine.start(call_echo, "v")
        task = await w.task()
    # The socket is gone and nobody reconnects: after 1s the attempt fails; attempt 2 is
    # anyone's, here a worker on the store.
    async with Worker(srv.engine.storage, activities=[echo], queues=[QUEUE], poll_interval=0.05):
        assert await handle.result(timeout=10) == "v"
    step = (await srv.engine.history(handle.id)).steps[0]
    assert step.attempts == 2
    assert any(
        e.kind == "abandoned" and e.operation_id == task["operationId"] for e in srv.hub.events
    )


async def test_a_task_for_an_activity_the_worker_lacks_goes_to_a_worker_that_has_it(
    srv: Served,
) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.register(["something-else"], workerId="lacks-echo")
        handle = await srv.engine.start(call_echo, "x")
        await eventually(
            lambda: any(e.kind == "refused" for e in srv.hub.events), what="the refusal"
        )
        raw_task = await srv.engine.storage.scan(tr.TASK_PREFIX)
        task = tr.decode_task(raw_task[0][1])
        assert task.claimed_by is None and "lacks-echo" in task.refused_by
        assert "has no activity 'echo'" in (task.last_error or "")
        async with Worker(
            srv.engine.storage, activities=[echo], queues=[QUEUE], poll_interval=0.05
        ):
            assert await handle.result(timeout=5) == "x"
        assert w.pending == []  # never offered to the worker that lacks it


async def test_a_worker_that_rejects_a_task_hands_it_to_another(srv: Served) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.register(["echo"], workerId="rejecter")
        handle = await srv.engine.start(call_echo, "y")
        task = await w.task()
        await w.reply(task, "rejected", error="echo is broken here")
        await w.expect("resultAck")
        async with Worker(
            srv.engine.storage, activities=[echo], queues=[QUEUE], poll_interval=0.05
        ):
            assert await handle.result(timeout=5) == "y"
        assert (await srv.engine.history(handle.id)).steps[0].attempts == 1  # same attempt


async def test_a_cancelled_run_sends_cancel_and_a_late_result_is_refused(srv: Served) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.register(["echo"])
        handle = await srv.engine.start(call_echo, 1)
        task = await w.task()
        await srv.engine.cancel(handle.id)
        cancel = await w.expect("cancel")
        assert cancel["operationId"] == task["operationId"]
        await w.reply(task, "completed", value="late")
        refused = await w.expect("resultRejected")
        assert refused["code"] == "stale" and "no longer" in refused["message"]
        assert await srv.results_stored() == []


async def test_remote_workers_are_listed_and_an_operator_drain_stops_new_tasks(
    srv: Served,
) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.register(["echo"], workerId="drainable")
        (info,) = await srv.engine.workers()
        assert (info.id, info.queues, info.activities) == ("drainable", (QUEUE,), ("echo",))
        await srv.engine.drain_worker("drainable")
        await eventually(
            lambda: srv.hub.sessions["drainable"].drain_requested,
            timeout=5,
            what="the drain to be read",
        )
        handle = await srv.engine.start(call_echo, "later")
        with pytest.raises(asyncio.TimeoutError):
            await w.task(timeout=0.8)
        await srv.engine.resume_worker("drainable")
        task = await w.task()
        await w.reply(task, "completed", value="now")
        assert await handle.result(timeout=5) == "now"


async def test_a_silent_socket_is_closed_after_three_heartbeat_intervals(srv: Served) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.register(["echo"], beat=False)
        frame = await w.expect("protocolError", timeout=5)
        assert frame["code"] == "heartbeat_timeout"
        assert await w.closed() == 1002


async def test_a_reconnect_while_the_old_socket_looks_open_takes_the_session_over(
    srv: Served,
) -> None:
    async with raw(srv.stream(), srv.token) as old:
        ack = await old.register(["echo"], workerId="half-open", concurrency=1)
        handle = await srv.engine.start(call_echo, "h")
        task = await old.task()
        held = [{"operationId": task["operationId"], "attemptToken": task["attemptToken"]}]
        async with raw(srv.stream(), srv.token) as new:
            ack2 = await new.register(
                ["echo"],
                workerId="half-open",
                sessionId=ack["sessionId"],
                inFlight=held,
                concurrency=1,
            )
            assert ack2["resumed"] == [task["operationId"]]
            assert await old.closed() == 1008  # replaced
            second = await srv.engine.start(call_echo, "queued")
            with pytest.raises(asyncio.TimeoutError):  # concurrency 1: its slot is taken
                await new.task(timeout=0.5)
            await new.reply(task, "completed", value="H")
            await new.expect("resultAck")
            assert await handle.result(timeout=5) == "H"
            nxt = await new.task()
            assert nxt["workflowId"] == second.id
            await new.reply(nxt, "completed", value="Q")
            assert await second.result(timeout=5) == "Q"
    assert (await srv.engine.history(handle.id)).steps[0].attempts == 1


async def test_a_server_shutdown_hands_cancelled_attempts_back_as_the_same_attempt(
    srv: Served,
) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.register(["echo"], workerId="told-to-stop")
        handle = await srv.engine.start(call_echo, "s")
        task = await w.task()
        stopping = asyncio.ensure_future(srv.hub.shutdown(timeout_s=5, worker_id="told-to-stop"))
        frame = await w.expect("shutdown")
        assert frame["drainTimeoutMs"] == 5000
        await w.reply(task, "cancelled")
        await w.expect("resultAck")
        await w.ws.close()
        await asyncio.wait_for(stopping, 10)
    assert srv.hub.sessions == {}
    assert await srv.engine.workers(include_gone=True) == []  # its record is gone
    async with Worker(srv.engine.storage, activities=[echo], queues=[QUEUE], poll_interval=0.05):
        assert await handle.result(timeout=5) == "s"
    assert (await srv.engine.history(handle.id)).steps[0].attempts == 1


async def test_a_worker_that_leaves_holding_nothing_ends_its_session_at_once(srv: Served) -> None:
    async with raw(srv.stream(), srv.token) as w:
        await w.register(["echo"], workerId="brief")
    await eventually(lambda: srv.hub.sessions == {}, what="the session to end")
    assert await srv.engine.workers(include_gone=True) == []
