"""Task claims on every store: one holder per task, claims that expire, fenced outcomes.

Driven through ``pyweft.engine.tasks.claims`` directly with explicit times (no
sleeps), on memory, SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio

import pytest

from pyweft.engine.tasks import claims
from pyweft.engine.tasks import records as tr
from pyweft.storage.base import Put, Storage
from pyweft.storage.factory import open_storage
from support.backends import Backend

T0 = 1_800_000_000.0


def task(n: int, *, queue: str = "q", visibility: float = 10.0) -> tr.Task:
    tid = tr.task_id(f"run-{n}", 0, 1, 1)
    return tr.Task(
        id=tid,
        queue=queue,
        workflow_id=f"run-{n}",
        workflow_type="wf",
        activity="act",
        step=1,
        attempt=1,
        generation=0,
        execution_token="tok",
        args=b"\x90",
        created_at=T0 + n / 1000,
        scheduled_at=T0,
        ready_key=tr.ready_key(queue, T0 + n / 1000, tid),
        visibility_s=visibility,
    )


async def queue_tasks(storage: Storage, tasks: list[tr.Task]) -> None:
    ops = []
    for t in tasks:
        raw = tr.encode(t)
        ops += [Put(key=tr.task_key(t.id), value=raw), Put(key=t.ready_key, value=raw)]
    await storage.batch(ops)


def second_connection(backend: Backend) -> Storage:
    source = backend.storage()
    return source if isinstance(source, Storage) else open_storage(source)


async def test_racing_workers_never_hold_the_same_task(backend: Backend) -> None:
    async with backend.engine() as eng:  # creates the store (schema) for both connections
        one = eng._core.storage
    one = second_connection(backend)
    two = second_connection(backend)
    try:
        await queue_tasks(one, [task(n) for n in range(20)])
        got: list[claims.Claimed] = []
        for _ in range(4):  # several rounds, both at once each time
            a, b = await asyncio.gather(
                claims.claim(one, "q", "wa", T0, 6, (0, 2)),
                claims.claim(two, "q", "wb", T0, 6, (1, 2)),
            )
            got += a + b
        ids = [c.task.id for c in got]
        assert len(ids) == len(set(ids)) == 20
        assert await one.scan(tr.ready_prefix("q")) == []
    finally:
        if two is not one:
            await two.close()
        await one.close()


async def test_an_expired_claim_fails_the_attempt_and_refuses_the_late_result(
    backend: Backend,
) -> None:
    async with backend.engine() as eng:
        storage = eng._core.storage
        await queue_tasks(storage, [task(1, visibility=10.0)])
        [held] = await claims.claim(storage, "q", "w1", T0, 1)
        assert held.task.claimed_by == "w1" and held.task.claim_until == T0 + 10
        assert await claims.reap(storage, T0 + 9.9) == 0  # not yet
        assert await claims.extend(storage, [held], T0 + 8) == []  # kept: until T0 + 18
        assert await claims.reap(storage, T0 + 17) == 0
        assert await claims.reap(storage, T0 + 18.5) == 1
        raw = await storage.get(tr.result_key(held.task.id))
        assert raw is not None
        result = tr.decode_result(raw)
        assert (result.ok, result.timeout_kind, result.worker) == (False, "visibility", "w1")
        assert result.error is not None and "stopped heartbeating" in result.error.message
        late = tr.TaskResult(task_id=held.task.id, ok=True, at=T0 + 20, worker="w1")
        assert not await claims.finish(storage, held, late)  # refused: nothing written
        assert tr.decode_result(await storage.get(tr.result_key(held.task.id)) or b"") == result
        assert await claims.extend(storage, [held], T0 + 20) == [held]  # lost


@pytest.mark.parametrize("share", [(0, 1), (0, 2)], ids=["lone-worker", "among-workers"])
async def test_a_handed_back_task_keeps_its_place_and_skips_who_refused_it(
    backend: Backend, share: tuple[int, int]
) -> None:
    async with backend.engine() as eng:
        storage = eng._core.storage
        await queue_tasks(storage, [task(1), task(2)])
        [first] = await claims.claim(storage, "q", "w1", T0, 1, share)
        assert first.task.workflow_id == "run-1"
        assert await claims.hand_back(storage, first, refuse=True, error="no such activity")
        [again] = await claims.claim(storage, "q", "w1", T0, 1, share)
        assert again.task.workflow_id == "run-2"  # w1 refused run-1
        [other] = await claims.claim(storage, "q", "w2", T0, 1, share)
        assert other.task.workflow_id == "run-1"
        assert other.task.refused_by == ("w1",) and other.task.last_error == "no such activity"
        assert await storage.scan(tr.LEASE_PREFIX) != []
        done = [
            (c, tr.TaskResult(task_id=c.task.id, ok=True, at=T0, worker="x"))
            for c in (again, other)
        ]
        assert await claims.finish_many(storage, done) == [True, True]
        assert await storage.scan(tr.LEASE_PREFIX) == []
        assert await storage.scan(tr.TASK_PREFIX) == []


@pytest.mark.parametrize("share", [(0, 1), (0, 2)], ids=["lone-worker", "among-workers"])
async def test_a_dead_workers_concurrency_slot_comes_back_only_when_its_claim_expires(
    backend: Backend, share: tuple[int, int]
) -> None:
    from pyweft.engine.tasks import limits

    async with backend.engine() as eng:
        storage = eng._core.storage
        await limits.store(storage, limits.check("q", 1, None))
        await queue_tasks(storage, [task(1, visibility=10.0), task(2, visibility=10.0)])
        [held] = await claims.claim(storage, "q", "dies", T0, 5, share)
        assert held.task.slot is not None
        # The holder is SIGKILLed: nobody may run a second task of the queue meanwhile.
        assert await claims.claim(storage, "q", "w2", T0 + 5, 5, share) == []
        assert await claims.reap(storage, T0 + 9) == 0
        assert await claims.claim(storage, "q", "w2", T0 + 9, 5, share) == []
        assert await claims.reap(storage, T0 + 11) == 1  # expired: the attempt fails...
        [next_one] = await claims.claim(storage, "q", "w2", T0 + 11, 5, share)
        assert next_one.task.workflow_id == "run-2"  # ...and its slot is free again
        assert [k for k, _ in await storage.scan(limits.CONCURRENCY_PREFIX)] == [next_one.task.slot]
