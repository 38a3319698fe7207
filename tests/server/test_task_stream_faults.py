"""Task streams on a store that misbehaves, with the interleavings forced: a result
whose write fails is not lost, and a result that arrives while its claim is being
extended is stored, not refused."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from pyweft import RetryPolicy, WorkflowContext, activity, workflow
from pyweft.engine.tasks import records as tr
from pyweft.storage.base import Op
from pyweft.storage.factory import open_storage
from pyweft.testing.faults import FaultyStorage
from pyweft.worker import RemoteWorker
from support.poll import eventually

from .task_stream_kit import QUEUE, call_echo, echo, raw, served


def writes_result(ops: Sequence[Op]) -> bool:
    return any(op.key.startswith(tr.RESULT_PREFIX) for op in ops)


def extends_lease(ops: Sequence[Op]) -> bool:
    """A claim's extension: a new lease entry, and no outcome."""
    keys = [op.key for op in ops]
    return any(k.startswith(tr.LEASE_PREFIX) for k in keys) and not writes_result(ops)


@activity(name="quick", queue=QUEUE, visibility_timeout="0.6s", retry=RetryPolicy(max_attempts=1))
async def quick(x: int) -> int:
    return x


@workflow
async def call_quick(ctx: WorkflowContext, x: int) -> int:
    return await ctx.run(quick, x)


async def test_a_result_whose_write_fails_is_sent_again_after_a_reconnect(tmp_path: Path) -> None:
    faulty = FaultyStorage(open_storage(f"sqlite:///{tmp_path / 'f.db'}"))
    async with served(tmp_path, storage=faulty) as srv:
        async with RemoteWorker(srv.url, token=srv.token, activities=[echo], queues=[QUEUE]) as w:
            faulty.fail_nth_write(1, match=writes_result)
            handle = await srv.engine.start(call_echo, "kept")
            assert await handle.result(timeout=15) == "kept"
            assert w.reconnects == 1  # the server closed the socket (1011) on the failure
        assert faulty.counts.total == 1
        step = (await srv.engine.history(handle.id)).steps[0]
        assert (step.status, step.attempts) == ("completed", 1)


async def test_a_failed_result_write_closes_the_socket_with_1011_and_stores_nothing(
    tmp_path: Path,
) -> None:
    faulty = FaultyStorage(open_storage(f"sqlite:///{tmp_path / 'f.db'}"))
    async with served(tmp_path, storage=faulty) as srv, raw(srv.stream(), srv.token) as w:
        await w.register(["echo"])
        await srv.engine.start(call_echo, 1)
        task = await w.task()
        faulty.fail_nth_write(1, match=writes_result)
        await w.reply(task, "completed", value=1)
        assert await w.closed() == 1011
        assert await srv.results_stored() == []


async def test_a_result_during_its_claim_s_extension_waits_for_it_and_is_stored(
    tmp_path: Path,
) -> None:
    faulty = FaultyStorage(open_storage(f"sqlite:///{tmp_path / 'f.db'}"))
    async with served(tmp_path, call_quick, storage=faulty) as srv:
        async with raw(srv.stream(), srv.token) as w:
            await w.register(["quick"], beat=False)
            handle = await srv.engine.start(call_quick, 5)
            task = await w.task()
            held = faulty.pause_next_write(match=extends_lease)
            # A third of the 0.6s visibility later, the server extends the claim: held.
            await eventually(lambda: held.is_reached, timeout=5, what="the extension write")
            await w.reply(task, "completed", value=50)  # arrives mid-extension
            held.release()
            ack = await w.expect("resultAck")
            assert ack["operationId"] == task["operationId"]
        assert await handle.result(timeout=5) == 50
        # Had the result not waited, it would have been stored first, the extension would
        # then have failed, and the worker been sent a cancel for what it had finished.
        assert not any(e.kind == "cancel" for e in srv.hub.events)


async def test_results_that_arrive_while_one_is_written_share_the_next_write(
    tmp_path: Path,
) -> None:
    faulty = FaultyStorage(open_storage(f"sqlite:///{tmp_path / 'f.db'}"))
    async with served(tmp_path, storage=faulty) as srv, raw(srv.stream(), srv.token) as w:
        await w.register(["echo"], concurrency=3)
        handles = [await srv.engine.start(call_echo, i) for i in range(3)]
        tasks = [await w.task() for _ in range(3)]
        first = faulty.pause_next_write(match=writes_result)
        await w.reply(tasks[0], "completed", value="a")
        await eventually(lambda: first.is_reached, timeout=5, what="the first result's write")
        await w.reply(tasks[1], "completed", value="b")
        await w.reply(tasks[2], "completed", value="c")
        await w.reply(tasks[1], "completed", value="b")  # a resend while it waits: ignored
        second = faulty.pause_next_write(match=writes_result)
        first.release()
        await eventually(lambda: second.is_reached, timeout=5, what="the second write")
        assert second.ops is not None
        stored = {op.key for op in second.ops if op.key.startswith(tr.RESULT_PREFIX)}
        assert stored == {tr.result_key(t["operationId"]) for t in tasks[1:]}  # one batch
        second.release()
        acks = [await w.expect("resultAck") for _ in range(3)]
        assert [a["operationId"] for a in acks] == [t["operationId"] for t in tasks]
        assert [await h.result(timeout=5) for h in handles] == ["a", "b", "c"]
        with pytest.raises(asyncio.TimeoutError):  # no reply to the resend
            await w.recv(timeout=0.3)
