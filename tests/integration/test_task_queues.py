"""Activity task queues: attempts handed to Worker processes' loops, fenced by claims.

Engine and workers share one store (the same memory store, or the same SQLite file
or PostgreSQL schema through their own connections).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from pyweft import (
    ApplicationError,
    ConfigurationError,
    DefinitionError,
    InvalidArgumentError,
    ResultTimeoutError,
    RetryPolicy,
    SystemClock,
    Worker,
    WorkflowContext,
    WorkflowFailedError,
    activity,
    activity_context,
    workflow,
)
from pyweft.engine.replay.commit import Committer
from pyweft.engine.tasks import claims
from pyweft.engine.tasks import records as tr
from pyweft.storage.base import Delete, Op, Put
from pyweft.storage.factory import open_storage
from pyweft.testing.faults import FaultyStorage
from support.backends import Backend
from support.poll import eventually

ran: list[tuple[str, Any]] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()
    gates[:] = [asyncio.Event()]


@activity(queue="media")
async def resize(x: int) -> int:
    ctx = activity_context()
    ran.append(("resize", (x, ctx.attempt, ctx.workflow_id)))
    return x * 2


@activity
async def local_step(x: int) -> int:
    ran.append(("local", x))
    return x + 1


@activity(queue="media", retry=RetryPolicy(max_attempts=3, initial_interval=0.01))
async def flaky(x: int) -> int:
    attempt = activity_context().attempt
    ran.append(("flaky", attempt))
    if attempt < 3:
        raise ApplicationError(f"not yet ({attempt})", type="NotYet")
    return x


@activity(queue="media", retry=RetryPolicy(max_attempts=5, initial_interval=0.01))
async def refuses(x: int) -> int:
    raise ApplicationError("bad input", type="BadInput", non_retryable=True)


gates: list[asyncio.Event] = []


@activity(queue="media")
async def slow(x: int) -> int:
    ran.append(("slow-start", x))
    try:
        await asyncio.wait_for(gates[0].wait(), 5)
    except asyncio.CancelledError:
        ran.append(("slow-cancelled", activity_context().cancel_reason))
        raise
    ran.append(("slow-end", x))
    return x


@workflow
async def pipeline(ctx: WorkflowContext, x: int) -> list[int]:
    a = await ctx.run(local_step, x)
    b = await ctx.run(resize, a)
    return [a, b]


@workflow
async def thrice(ctx: WorkflowContext, x: int) -> list[int]:
    return [x := await ctx.run(resize, x) for _ in range(3)]


@workflow
async def routed(ctx: WorkflowContext, x: int) -> int:
    return await ctx.run(local_step, x, queue="media")


@workflow
async def one(ctx: WorkflowContext, name: str, x: int) -> Any:
    return await ctx.run(name, x)


@workflow
async def guarded(ctx: WorkflowContext, x: int) -> Any:
    try:  # as users write it: a step's failure is caught and reported
        return await ctx.run(slow, x)
    except Exception as exc:
        return f"caught {type(exc).__name__}"


ACTS = [resize, local_step, flaky, refuses, slow]


def engine(backend: Backend, **kw: Any) -> Any:
    return backend.engine(
        workflows=[pipeline, routed, one, thrice, guarded],
        activities=ACTS,
        clock=SystemClock(),
        poll_interval=0.05,
        **kw,
    )


def worker(backend: Backend, acts: list[Any] = ACTS, **kw: Any) -> Worker:
    kw.setdefault("queues", ["media"])
    kw.setdefault("poll_interval", 0.05)
    return Worker(backend.storage(), activities=acts, **kw)


async def test_a_worker_steps_record_rides_with_the_runs_next_write(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step a worker ran costs the engine one commit, not two: its record goes with
    the next task (or the run's end), and its stored outcome is deleted in that batch."""
    batches: list[list[Op]] = []
    commit = Committer.commit

    async def recording(self: Committer, ops: Sequence[Op], *args: Any, **kw: Any) -> bool:
        if kw.get("workflow_id") == "t1":
            batches.append(list(ops))
        return await commit(self, ops, *args, **kw)

    monkeypatch.setattr(Committer, "commit", recording)
    async with engine(backend, serve_queues=[]) as eng, worker(backend):
        assert await (await eng.start(thrice, 1, id="t1")).result(timeout=10) == [2, 4, 8]
        assert await eng._core.storage.scan(tr.RESULT_PREFIX) == []
    with_records = [b for b in batches if any(isinstance(op, Put) and ":j:" in op.key for op in b)]
    assert len(with_records) == 3  # steps 2 and 3's tasks, then the end, each with one record
    for batch in with_records:
        puts = {op.key for op in batch if isinstance(op, Put)}
        deletes = {op.key for op in batch if isinstance(op, Delete)}
        assert any(k.startswith(tr.TASK_PREFIX) for k in puts) or "wf:t1" in puts
        assert sum(k.startswith(tr.RESULT_PREFIX) for k in deletes) == 1
    assert len(batches) == 4  # task 1; record 1 + task 2; record 2 + task 3; record 3 + end


async def test_a_worker_claims_when_rung_not_each_time_an_attempt_ends(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ending attempt frees a slot but announces no task: with the queue found short
    by the last claim, only a ring (a task written) or a poll makes the worker look."""
    looks: list[int] = []
    claim = claims.claim

    async def counted(*args: Any, **kw: Any) -> list[claims.Claimed]:
        got = await claim(*args, **kw)
        looks.append(len(got))
        return got

    monkeypatch.setattr(claims, "claim", counted)
    async with engine(backend, serve_queues=[]) as eng, worker(backend, poll_interval=60) as w:
        await eventually(lambda: looks == [0], what="the worker's first look")
        assert await (await eng.start(thrice, 1, id="t1")).result(timeout=10) == [2, 4, 8]
        await asyncio.sleep(0.05)  # time for any claim an ending attempt would prompt
        assert w.completed == 3
    assert looks[0] == 0 and sum(looks) == 3
    assert len(looks) <= 4  # the first look, then at most one per task written


async def tasks_in(storage: Any) -> list[tr.Task]:
    return [tr.decode_task(raw) for _, raw in await storage.scan(tr.TASK_PREFIX)]


async def test_an_activity_on_an_unserved_queue_runs_on_a_worker(backend: Backend) -> None:
    async with engine(backend, serve_queues=["default"]) as eng:
        handle = await eng.start(pipeline, 1, id="p1")
        storage = eng._core.storage
        # No worker yet: the local step ran here, the media step waits as a task.
        await eventually(lambda: _has_tasks(storage), what="a task record")
        assert ran == [("local", 1)]
        [task] = await tasks_in(storage)
        assert (task.activity, task.queue, task.step, task.attempt) == ("resize", "media", 2, 1)
        async with worker(backend) as w:
            assert await handle.result(timeout=10) == [2, 4]
            assert w.completed == 1
        assert ran[1] == ("resize", (2, 1, "p1"))
        assert await tasks_in(storage) == []
        assert await storage.scan(tr.RESULT_PREFIX) == []  # consumed with the step


async def _has_tasks(storage: Any) -> bool:
    return bool(await storage.scan(tr.TASK_PREFIX))


async def test_serve_queues_none_runs_everything_in_the_engine(backend: Backend) -> None:
    async with engine(backend) as eng:
        assert await (await eng.start(pipeline, 1, id="p1")).result(timeout=5) == [2, 4]
        assert await eng._core.storage.scan(tr.TASK_PREFIX) == []


async def test_a_per_call_queue_overrides_the_activitys_own(backend: Backend) -> None:
    async with engine(backend, serve_queues=["default"]) as eng, worker(backend):
        assert await (await eng.start(routed, 5, id="r1")).result(timeout=10) == 6


async def test_a_failed_attempt_on_a_worker_is_retried_per_the_policy(backend: Backend) -> None:
    async with engine(backend, serve_queues=[]) as eng, worker(backend):
        assert await (await eng.start(one, "flaky", 7, id="f1")).result(timeout=10) == 7
        assert [a for k, a in ran if k == "flaky"] == [1, 2, 3]
        history = await eng.history("f1")
        step = [e for e in history.events if getattr(e, "step", None) == 1]
        assert step


async def test_a_non_retryable_failure_on_a_worker_fails_the_step_once(backend: Backend) -> None:
    async with engine(backend, serve_queues=[]) as eng, worker(backend):
        handle = await eng.start(one, "refuses", 1, id="n1")
        with pytest.raises(
            WorkflowFailedError, match=r"failed after 1 attempt.*BadInput: bad input"
        ):
            await handle.result(timeout=10)


async def test_an_unknown_activity_goes_back_for_another_worker(backend: Backend) -> None:
    async with engine(backend, serve_queues=[]) as eng:
        handle = await eng.start(one, "resize", 3, id="u1")
        storage = eng._core.storage
        async with worker(backend, [local_step], worker_id="w-without") as w1:
            await eventually(lambda: w1.refused == 1, what="the task refused")
            [task] = await tasks_in(storage)
            assert task.claimed_by is None and task.refused_by == ("w-without",)
            assert task.last_error is not None and "has no activity 'resize'" in task.last_error
            await w1.claim_now()  # it does not take it again
            assert w1.refused == 1
            async with worker(backend, worker_id="w-with"):
                assert await handle.result(timeout=10) == 6


async def test_a_result_from_a_displaced_attempt_is_refused(backend: Backend) -> None:
    async with engine(backend, serve_queues=[]) as eng:
        handle = await eng.start(one, "flaky", 9, id="s1")
        storage = eng._core.storage
        await eventually(lambda: _has_tasks(storage), what="a task record")
        now = SystemClock().now()
        [held] = await claims.claim(storage, "media", "ghost", now, 1)
        # The ghost worker goes silent: past its visibility timeout the attempt fails.
        assert await claims.reap(storage, now + held.task.visibility_s + 1) == 1
        async with worker(backend, worker_id="live") as w:
            assert await handle.result(timeout=10) == 9
            late = tr.TaskResult(task_id=held.task.id, ok=True, at=now, worker="ghost")
            assert not await claims.finish(storage, held, late)
            assert w.completed >= 1
        # Attempt 1 was the ghost's: the live worker ran attempts 2 and 3.
        assert [a for k, a in ran if k == "flaky"] == [2, 3]


async def test_cancelling_the_run_cancels_the_attempt_on_the_worker(backend: Backend) -> None:
    async with engine(backend, serve_queues=[]) as eng, worker(backend) as w:
        handle = await eng.start(one, "slow", 1, id="c1")
        await eventually(lambda: ("slow-start", 1) in ran, what="the attempt started")
        await eng.cancel("c1")
        await eventually(lambda: _no_tasks(eng._core.storage), what="the task withdrawn")
        await w.heartbeat()
        await eventually(lambda: any(k == "slow-cancelled" for k, _ in ran), what="cancelled")
        assert (await handle.describe()).status == "cancelled"
        await eventually(lambda: w.in_flight == 0, what="the slot freed")


async def _no_tasks(storage: Any) -> bool:
    return not await storage.scan(tr.TASK_PREFIX)


async def test_a_drained_worker_stops_claiming_until_resumed(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pyweft.worker")
    async with engine(backend, serve_queues=[]) as eng, worker(backend, worker_id="w1") as w:
        [info] = await eng.workers()
        assert (info.id, info.status, info.queues) == ("w1", "active", ("media",))
        await eng.drain_worker("w1")
        await w.heartbeat()
        assert w.draining
        [info] = await eng.workers()
        assert info.status == "drained" and info.drain_requested
        handle = await eng.start(one, "resize", 4, id="d1")
        await eventually(lambda: _has_tasks(eng._core.storage), what="a task record")
        assert await w.claim_now() == 0
        await eng.resume_worker("w1")
        await w.heartbeat()
        assert await handle.result(timeout=10) == 8
        said = [r.getMessage() for r in caplog.records if r.name == "pyweft.worker"]
        assert "worker w1: drain requested: no new claims, 0 in flight finish" in said
        assert "worker w1: resumed: claiming again" in said
        with pytest.raises(InvalidArgumentError, match="no worker 'nobody'"):
            await eng.drain_worker("nobody")


async def test_stopping_hands_unfinished_attempts_back_for_another_worker(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pyweft.worker")
    async with engine(backend, serve_queues=[]) as eng:
        handle = await eng.start(one, "slow", 2, id="h1")
        first = worker(backend, worker_id="first")
        await first.start()
        await eventually(lambda: ("slow-start", 2) in ran, what="the attempt started")
        await first.stop(drain_timeout=0.01)
        [task] = await tasks_in(eng._core.storage)
        assert task.claimed_by is None and task.attempt == 1  # the same attempt, queued
        gates[0].set()
        async with worker(backend, worker_id="second"):
            assert await handle.result(timeout=10) == 2
        assert await eng.workers(include_gone=True) == []  # both unregistered
    said = [r.getMessage() for r in caplog.records if r.name == "pyweft.worker"]
    assert "worker first stopping: no new claims, 1 in flight get up to 0.01s to finish" in said
    assert "worker first handed task" in " ".join(said)
    assert "worker first stopped (0 done, 0 failed)" in said
    assert "worker second stopped (1 done, 0 failed)" in said


async def test_a_worker_whose_store_fails_while_it_stops_still_stops(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """Every write of the stopping worker fails (its record, the hand-back, the
    unregistering): it still cancels what runs and stops, and the attempt it could not
    hand back comes back when its claim expires, completed once by another worker."""
    caplog.set_level(logging.INFO, logger="pyweft.worker")
    async with engine(backend, serve_queues=[]) as eng:
        handle = await eng.start(guarded, 3, id="f1")
        inner = backend.storage()
        faults = FaultyStorage(open_storage(inner) if isinstance(inner, str) else inner)
        first = Worker(faults, activities=ACTS, queues=["media"], worker_id="first")
        await first.start()
        await eventually(lambda: ("slow-start", 3) in ran, what="the attempt started")
        faults.configure(write_failure_rate=1.0)
        await asyncio.wait_for(first.stop(drain_timeout=0.01), 10)
        assert ("slow-cancelled", "the worker is shutting down") in ran
        faults.heal()
        [task] = await tasks_in(eng._core.storage)
        assert task.claimed_by == "first"  # the hand-back failed: the claim stands
        await claims.reap(eng._core.storage, SystemClock().now() + task.visibility_s + 1)
        gates[0].set()
        async with worker(backend, worker_id="second"):
            assert await handle.result(timeout=10) == 3  # retried, not caught
        assert [x for k, x in ran if k == "slow-end"] == [3]
        if faults.inner is not backend.storage():
            await faults.inner.close()
    said = [r.getMessage() for r in caplog.records if r.name == "pyweft.worker"]
    assert "worker first stopped (0 done, 0 failed)" in said


async def test_a_restarted_engine_waits_for_the_same_task(backend: Backend) -> None:
    if backend.name == "memory":
        pytest.skip("a restart needs a durable store")
    async with engine(backend, serve_queues=[]) as eng:
        await eng.start(one, "resize", 5, id="x1")
        await eventually(lambda: _has_tasks(eng._core.storage), what="a task record")
    async with worker(backend) as w:
        await eventually(lambda: w.completed == 1, what="the task done while no engine ran")
    async with engine(backend, serve_queues=[]) as eng:
        assert await eng.get_handle("x1").result(timeout=10) == 10
        assert len([k for k, _ in ran if k == "resize"]) == 1


def test_bad_queue_options_are_refused_with_typed_errors(backend: Backend) -> None:
    with pytest.raises(ConfigurationError, match="serve_queues"):
        engine(backend, serve_queues="media")
    with pytest.raises(ConfigurationError, match="queue name"):
        engine(backend, serve_queues=["no spaces"])
    with pytest.raises(DefinitionError, match="queue"):
        activity(queue="a/b")(lambda: None)
    with pytest.raises(ConfigurationError, match="concurrency"):
        Worker(backend.storage(), activities=ACTS, concurrency=0)
    with pytest.raises(ConfigurationError, match="queue"):
        Worker(backend.storage(), activities=ACTS, queues="media")


async def test_a_bad_per_call_queue_fails_the_workflow_call(backend: Backend) -> None:
    @workflow(name="badq")
    async def badq(ctx: WorkflowContext) -> None:
        await ctx.run(resize, 1, queue="")

    async with backend.engine(workflows=[badq], activities=ACTS) as eng:
        with pytest.raises(Exception, match="queue"):
            await (await eng.start(badq, id="b1")).result(timeout=5)


async def test_the_workers_guide_example_runs_on_an_engine_and_a_worker(tmp_path: Any) -> None:
    from pyweft import Engine, MemoryStorage
    from support.guides import load

    guide = load("workers", 1)
    store = MemoryStorage()
    async with (
        Engine(store, workflows=[guide.publish], serve_queues=["default"]) as eng,
        Worker(store, activities=[guide.resize], queues=["media", "media-hd"]),
    ):
        handle = await eng.start(guide.publish, "cat.png", id="g1")
        assert await handle.result(timeout=10) == "cat.png@1280"


@activity(queue="media", timeout=0.2, retry=RetryPolicy(max_attempts=1))
async def overruns(x: int) -> int:
    await asyncio.sleep(5)
    return x


@activity(queue="media", heartbeat_timeout=0.2, retry=RetryPolicy(max_attempts=1))
def goes_quiet(x: int) -> int:
    import time

    ctx = activity_context()
    ctx.heartbeat()
    for _ in range(100):  # stops heartbeating; notices its cancellation
        if ctx.cancelled:
            ran.append(("quiet-cancelled", ctx.cancel_reason))
            return -1
        time.sleep(0.02)
    return x


async def test_the_worker_enforces_the_activitys_timeouts(backend: Backend) -> None:
    acts = [overruns, goes_quiet]
    async with (
        backend.engine(
            workflows=[one], activities=acts, clock=SystemClock(), serve_queues=[]
        ) as eng,
        worker(backend, acts),
    ):
        with pytest.raises(
            WorkflowFailedError, match=r"ActivityTimeoutError: .*timed out after 0.2s"
        ):
            await (await eng.start(one, "overruns", 1, id="t1")).result(timeout=10)
        with pytest.raises(WorkflowFailedError, match=r"did not heartbeat for 0.2s"):
            await (await eng.start(one, "goes_quiet", 1, id="t2")).result(timeout=10)
        # The thread cannot be interrupted: it sees its cancellation at its next look.
        await eventually(lambda: bool(ran), what="the def activity to notice")
        assert ran == [("quiet-cancelled", "it did not heartbeat within its heartbeat_timeout")]


def test_the_sync_worker_serves_a_queue_from_blocking_code(tmp_path: Any) -> None:
    import pyweft.sync

    url = f"sqlite:///{tmp_path / 'sync.db'}"
    with (
        pyweft.sync.Engine(url, workflows=[one], activities=ACTS, serve_queues=[]) as eng,
        pyweft.sync.Worker(url, activities=ACTS, queues=["media"], poll_interval=0.05) as w,
    ):
        assert eng.start(one, "resize", 21, id="sy1").result(timeout=10) == 42
        assert w.async_worker.completed == 1


async def test_the_workers_guide_limits_example_runs(backend: Backend) -> None:
    from support.guides import load

    guide = load("workers", 3)
    async with engine(backend) as eng:
        await guide.limit(eng)
        assert await eng.activity_queue_limits("media") is None


@activity
async def after_remote_started(x: int) -> int:
    """Wins the race, but only once the worker runs the other branch."""
    for _ in range(500):
        if ("slow-start", x) in ran:
            return x + 1
        await asyncio.sleep(0.01)
    raise AssertionError("the remote branch never started")


@workflow
async def racer(ctx: WorkflowContext, x: int) -> Any:
    return await ctx.race(ctx.run(slow, x), ctx.run(after_remote_started, x))


async def test_a_remote_attempt_that_loses_a_race_is_withdrawn_and_cancelled(
    backend: Backend,
) -> None:
    async with (
        backend.engine(
            workflows=[racer],
            activities=[*ACTS, after_remote_started],
            clock=SystemClock(),
            serve_queues=["default"],
        ) as eng,
        worker(backend) as w,
    ):
        handle = await eng.start(racer, 3, id="race1")
        assert await handle.result(timeout=10) == 4  # the local branch won
        # The losing task is withdrawn; the worker that holds it is cancelled at its next
        # heartbeat.
        await eventually(lambda: _no_tasks(eng._core.storage), what="the task withdrawn")
        await w.heartbeat()
        await eventually(lambda: w.in_flight == 0, what="the worker's slot freed")
        await eventually(lambda: any(k == "slow-cancelled" for k, _ in ran), what="cancelled")
        assert ("slow-end", 3) not in ran
        assert await eng._core.storage.scan(tr.READY_PREFIX) == []


@pytest.mark.parametrize("serving", [["media"], None], ids=["media", "every-queue"])
async def test_an_engine_that_serves_the_queue_waits_for_a_task_already_written(
    backend: Backend, serving: list[str] | None
) -> None:
    if backend.name == "memory":
        pytest.skip("a restart needs a durable store")
    async with engine(backend, serve_queues=[]) as eng:
        await eng.start(one, "resize", 6, id="m1")
        await eventually(lambda: _has_tasks(eng._core.storage), what="a task record")
    # Reopened serving "media" itself (or every queue, the default): the written task is
    # waited for, not run here too.
    async with engine(backend, serve_queues=serving) as eng:
        with pytest.raises(ResultTimeoutError):
            await eng.get_handle("m1").result(timeout=0.5)
        assert [k for k, _ in ran if k == "resize"] == []
        async with worker(backend):
            assert await eng.get_handle("m1").result(timeout=10) == 12
    assert len([k for k, _ in ran if k == "resize"]) == 1
