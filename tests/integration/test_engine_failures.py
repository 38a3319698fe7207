"""The engine's own failures never reach workflow code, and stranded runs resume.

A storage error while a step commits, a lost lease, a suspend or a shutdown tear
the run down with ``RunTornDown`` (a ``BaseException``), so a workflow written
as users write them (``try: pay() except Exception: refund()``) never takes a
branch the journal does not back. A run a transient storage failure stopped is
resumed by the same live engine once the store takes writes again.

The faults here are real: another connection holds SQLite's write lock past the
engine's busy timeout, and a second engine takes the store lease.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pytest

from pyweft import (
    Engine,
    MemoryStorage,
    RunTornDown,
    SQLiteStorage,
    VirtualClock,
    WorkflowContext,
    activity,
    workflow,
)
from pyweft.engine.replay import keys, records
from pyweft.storage.base import Expect, Op, Put
from support.poll import eventually


class SqliteLock:
    """Holds SQLite's write lock from another connection, as a backup or a shell would."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._mutex = threading.Lock()
        self.held = False

    def hold(self) -> None:
        with self._mutex:
            if not self.held:
                self._conn.execute("BEGIN IMMEDIATE")
                self.held = True

    def release(self) -> None:
        with self._mutex:
            if self.held:
                self._conn.execute("ROLLBACK")
                self.held = False

    def close(self) -> None:
        self.release()
        self._conn.close()


ledger: Counter[str] = Counter()
lock_on_pay: SqliteLock | None = None


@activity
def pay(order: str) -> str:
    ledger["pay"] += 1
    if lock_on_pay is not None and ledger["pay"] == 1:
        lock_on_pay.hold()  # the commit of this very outcome will find the store locked
    return f"receipt-{order}"


@activity
def refund(order: str) -> None:
    ledger["refund"] += 1


@activity
def ship(order: str) -> None:
    ledger["ship"] += 1


@workflow
async def checkout(ctx: WorkflowContext, order: str) -> str:
    try:
        receipt = await ctx.run(pay, order)
    except Exception:
        await ctx.run(refund, order)
        return "refunded"
    await ctx.run(ship, order)
    return receipt


@workflow
async def checkout_catching_everything(ctx: WorkflowContext, order: str) -> str:
    try:
        receipt = await ctx.run(pay, order)
    except BaseException:  # wrong, but users write it: the teardown must still hold
        try:
            await ctx.run(refund, order)
        except RunTornDown:
            ledger["refund refused"] += 1
            raise
        return "refunded"
    await ctx.run(ship, order)
    return receipt


@pytest.fixture(autouse=True)
def _fresh_ledger() -> None:
    global lock_on_pay
    ledger.clear()
    lock_on_pay = None


def locked_store(tmp_path: Path) -> tuple[SQLiteStorage, SqliteLock]:
    global lock_on_pay
    path = tmp_path / "app.db"
    storage = SQLiteStorage(str(path), busy_timeout_s=0.2)
    lock_on_pay = SqliteLock(path)
    return storage, lock_on_pay


@pytest.mark.parametrize("wf", [checkout, checkout_catching_everything])
async def test_a_commit_failing_on_a_held_lock_never_reaches_the_workflow(
    tmp_path: Path, wf: object
) -> None:
    storage, lock = locked_store(tmp_path)
    try:
        async with Engine(storage, workflows=[checkout, checkout_catching_everything]) as engine:
            handle = await engine.start(wf, "o-1", id="order-1")
            await eventually(lambda: engine.stats().stranded == 1, what="the run to be stranded")
            assert ledger["refund"] == 0 and ledger["ship"] == 0
            assert not engine.is_running_here("order-1")
            lock.release()
            assert await handle.result(timeout=10) == "receipt-o-1"
            stats = engine.stats()
            assert (stats.storage_failures, stats.redriven, stats.stranded) == (1, 1, 0)
            history = await engine.history("order-1")
            assert [s.name for s in history.steps] == ["pay", "ship"]
    finally:
        lock.close()
        await storage.close()
    # pay's outcome was kept in memory across the failure: it did not run again.
    assert ledger == Counter(
        {"pay": 1, "ship": 1}
        | ({"refund refused": 1} if wf is checkout_catching_everything else {})
    )


gate: asyncio.Event | None = None


@activity
async def pay_when_let(order: str) -> str:
    ledger["pay"] += 1
    assert gate is not None
    await gate.wait()
    return f"receipt-{order}"


@workflow
async def gated_checkout(ctx: WorkflowContext, order: str) -> str:
    try:
        receipt = await ctx.run(pay_when_let, order)
    except Exception:
        await ctx.run(refund, order)
        return "refunded"
    await ctx.run(ship, order)
    return receipt


async def test_a_deposed_engine_never_runs_the_workflow_s_except_branch() -> None:
    global gate
    gate = asyncio.Event()
    storage = MemoryStorage()
    clock_a, clock_b = VirtualClock(), VirtualClock()
    a = Engine(storage, workflows=[gated_checkout], clock=clock_a, ownership="lease")
    await a.open()
    await a.start(gated_checkout, "o-1", id="order-1")
    await eventually(lambda: ledger["pay"] == 1, what="engine A to call pay")
    clock_b.advance(60)  # engine A is "paused": its lease has expired for B
    b = Engine(
        storage, workflows=[gated_checkout], clock=clock_b, ownership="lease", lease_wait_timeout=1
    )
    with pytest.warns(Warning):  # A learns it was deposed (LeaseLostWarning)
        await b.open()
        await eventually(lambda: ledger["pay"] == 2, what="engine B to resume the run")
        gate.set()
        assert await b.get_handle("order-1").result(timeout=5) == "receipt-o-1"
        await eventually(lambda: not a.is_running_here("order-1"), what="A to drop the run")
    assert ledger["refund"] == 0 and ledger["ship"] == 1
    assert a.stats().stranded == 0  # deposed is not transient: A does not retry
    await b.shutdown()
    await a.shutdown()


@activity
def cleanup(order: str) -> None:
    ledger["cleanup"] += 1


@workflow
async def sleeper_with_cleanup(ctx: WorkflowContext, order: str) -> str:
    try:
        await ctx.sleep("1h")
    except asyncio.CancelledError:  # the documented way to react to a user's cancel
        await ctx.run(cleanup, order)
        raise
    finally:
        ledger["finally"] += 1
    return "slept"


async def test_shutdown_tears_runs_down_without_running_their_cancel_handlers() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    async with Engine(storage, workflows=[sleeper_with_cleanup], clock=clock) as engine:
        await engine.start(sleeper_with_cleanup, "o-1", id="s-1")
        await eventually(lambda: engine.is_running_here("s-1"), what="the run to start")
        await eventually(lambda: clock.pending_timers() > 0, what="the sleep to park")
    assert ledger["cleanup"] == 0
    assert ledger["finally"] == 1  # finally blocks may run; they record nothing
    async with Engine(storage, workflows=[sleeper_with_cleanup], clock=clock) as engine:
        history = await engine.history("s-1")
        assert [s.kind for s in history.steps if s.status == "completed"] == []
        clock.advance(3600)
        assert await engine.get_handle("s-1").result(timeout=5) == "slept"
    assert ledger["cleanup"] == 0


async def test_a_suspended_run_does_not_run_its_cancel_handler() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    async with Engine(storage, workflows=[sleeper_with_cleanup], clock=clock) as engine:
        await engine.start(sleeper_with_cleanup, "o-1", id="s-2")
        await eventually(lambda: clock.pending_timers() > 0, what="the sleep to park")
        await engine.suspend("s-2")
        assert (await engine.describe("s-2")).status == "suspended"
        assert ledger["cleanup"] == 0
        await engine.resume("s-2")
        clock.advance(3600)
        assert await engine.get_handle("s-2").result(timeout=5) == "slept"
    assert ledger["cleanup"] == 0


class PausingStorage(MemoryStorage):
    """Memory storage that holds the first conditional batch matching ``pause_when``."""

    def __init__(self) -> None:
        super().__init__()
        self.pause_when: Callable[[Sequence[Op]], bool] | None = None
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def conditional_batch(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> bool:
        if self.pause_when is not None and self.pause_when(ops):
            self.pause_when = None
            self.reached.set()
            await self.release.wait()
        return await super().conditional_batch(conditions, ops)


@workflow
async def one_step(ctx: WorkflowContext, order: str) -> str:
    await ctx.run(ship, order)
    return "shipped"


async def test_a_cancel_that_lands_just_before_the_final_commit_does_not_strand_the_run() -> None:
    storage = PausingStorage()
    storage.pause_when = lambda ops: any(  # the write that records the run completed
        isinstance(op, Put)
        and op.key == keys.wf("r")
        and records.decode_state(op.value).status == "completed"
        for op in ops
    )
    async with Engine(storage, workflows=[one_step]) as engine:
        await engine.start(one_step, "o-1", id="r")
        await storage.reached.wait()  # the run's finishing write is in flight
        other = Engine(storage, workflows=[one_step], role="client")  # another process
        async with other:
            await other.cancel("r")
        storage.release.set()
        await eventually(_status_is(engine, "r", {"completed", "cancelled"}), what="the run to end")
    assert ledger["ship"] == 1


def _status_is(engine: Engine, workflow_id: str, wanted: set[str]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return (await engine.describe(workflow_id)).status in wanted

    return check


@workflow
async def kid(ctx: WorkflowContext, order: str) -> str:
    await ctx.run(ship, order)
    return f"kid shipped {order}"


@workflow
async def parent_of_kid(ctx: WorkflowContext, order: str) -> str:
    return str(await ctx.start_child(kid, order, id="the-kid"))


@pytest.mark.parametrize("ownership", ["none", "workflow-lease"])
async def test_a_child_created_by_a_commit_whose_reply_was_lost_is_still_driven(
    ownership: str,
) -> None:
    from pyweft.testing import FaultyStorage

    faults = FaultyStorage(MemoryStorage())
    # The parent's commit that creates the child lands, but its reply is lost: the
    # parent is torn down before it launches the child.
    faults.fail_nth_write(
        match=lambda ops: any(isinstance(op, Put) and op.key == keys.wf("the-kid") for op in ops),
        outcome_unknown=True,
    )
    async with Engine(faults, workflows=[parent_of_kid, kid], ownership=ownership) as engine:
        handle = await engine.start(parent_of_kid, "o-1", id="p")
        assert await handle.result(timeout=10) == "kid shipped o-1"
        assert engine.stats().storage_failures == 1
    assert ledger["ship"] == 1
