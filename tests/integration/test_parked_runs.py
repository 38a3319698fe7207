"""Parked runs cost nothing while they wait, and evicted runs come back when needed.

A run waiting on a signal, update, condition, review or sleep reads nothing
from the store until something concerns it. Past ``max_cached_runs`` such runs
are evicted from memory (``max_cached_runs=0`` here: every idle run is) and
replayed from their journal by a message, a query, a cancel or their deadline.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from pyweft import Engine, MemoryStorage, Storage, WorkflowContext, activity, workflow
from pyweft.engine.replay import keys
from pyweft.errors import ConfigurationError, WorkflowCancelledError
from pyweft.storage.base import Delete, Expect, Put, StorageCapabilities
from support.backends import Backend
from support.poll import eventually

entered: Counter[str] = Counter()  # how often each run's workflow function started


@workflow(name="parked")
async def parked(ctx: WorkflowContext) -> Any:
    entered[ctx.workflow_id] += 1
    got: list[Any] = []
    ctx.on_query("got", lambda: list(got))
    ctx.on_update("add", lambda v: got.append(v) or len(got))
    value = await ctx.wait_for_signal("go", timeout=3600)
    return {"signal": value, "updates": got}


@workflow(name="napper")
async def napper(ctx: WorkflowContext) -> str:
    await ctx.sleep(600)
    return "rested"


@workflow(name="reviewed")
async def reviewed(ctx: WorkflowContext) -> str:
    decision = await ctx.review({"doc": 1}, review_type="doc")
    return decision.decision


class CountingStorage:
    """A real store, every call delegated; counts reads by key prefix."""

    def __init__(self, inner: Storage) -> None:
        self._inner = inner
        self.reads: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:  # notify/listen/count, if the store has them
        return getattr(self._inner, name)

    @property
    def capabilities(self) -> StorageCapabilities:
        return self._inner.capabilities

    async def get(self, key: str) -> bytes | None:
        self.reads[key.split(":", 1)[0] + ":"] += 1
        return await self._inner.get(key)

    async def scan(self, prefix: str, **kw: Any) -> list[tuple[str, bytes]]:
        self.reads[prefix.split(":", 1)[0] + ":"] += 1
        return await self._inner.scan(prefix, **kw)

    async def batch(self, ops: Sequence[Put | Delete]) -> None:
        await self._inner.batch(ops)

    async def conditional_batch(self, conds: Sequence[Expect], ops: Sequence[Put | Delete]) -> bool:
        return await self._inner.conditional_batch(conds, ops)

    async def close(self) -> None:
        await self._inner.close()


class GatedStorage(CountingStorage):
    """Holds the first batch that writes a key starting with ``hold`` until released."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.hold: str | None = None
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def _gate(self, ops: Sequence[Put | Delete]) -> None:
        if self.hold is not None and any(op.key.startswith(self.hold) for op in ops):
            self.hold = None
            self.held.set()
            await self.release.wait()

    async def batch(self, ops: Sequence[Put | Delete]) -> None:
        await self._gate(ops)
        await super().batch(ops)

    async def conditional_batch(self, conds: Sequence[Expect], ops: Sequence[Put | Delete]) -> bool:
        await self._gate(ops)
        return await super().conditional_batch(conds, ops)


def evicted(engine: Engine, workflow_id: str) -> bool:
    core = engine._core
    return workflow_id in core.residency.evicted and workflow_id not in core.runs


async def parked_and_evicted(engine: Engine, *ids: str) -> None:
    await eventually(lambda: all(evicted(engine, i) for i in ids), what="runs evicted")
    assert all(engine.is_running_here(i) for i in ids)


async def test_parked_runs_read_nothing_from_the_store_while_idle() -> None:
    store = CountingStorage(MemoryStorage())
    async with Engine(store, workflows=[parked], poll_interval=0.01) as engine:  # type: ignore[arg-type]
        for i in range(50):
            await engine.start(parked, id=f"idle-{i}")
        await eventually(
            lambda: all(engine._core.runs[f"idle-{i}"].idle for i in range(50)), what="parked"
        )
        store.reads.clear()
        await eventually(lambda: store.reads["wake:"] >= 20, what="20 wake-up scans")
        # Twenty poll intervals with fifty parked runs: the one store-wide scan, nothing else.
        assert set(store.reads) == {"wake:"}


async def test_an_evicted_run_is_replayed_and_completes_when_signalled(backend: Backend) -> None:
    async with backend.engine(workflows=[parked], max_cached_runs=0) as engine:
        handle = await engine.start(parked, id="ev-signal")
        await parked_and_evicted(engine, "ev-signal")
        assert await handle.update("add", "u1") == 1  # an update replays it, then it parks again
        await parked_and_evicted(engine, "ev-signal")
        await handle.signal("go", 7)
        assert await handle.result(timeout=5) == {"signal": 7, "updates": ["u1"]}


async def test_an_evicted_run_times_out_at_its_deadline_on_the_engine_clock(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[parked, napper], max_cached_runs=0) as engine:
        waiting = await engine.start(parked, id="ev-timeout")
        sleeping = await engine.start(napper, id="ev-sleep")
        await parked_and_evicted(engine, "ev-timeout", "ev-sleep")
        # One timer for all evicted runs, not one per run (nor a coroutine).
        assert backend.clock.pending_timers() == 1
        backend.clock.advance(601)
        assert await sleeping.result(timeout=5) == "rested"
        await parked_and_evicted(engine, "ev-timeout")
        backend.clock.advance(3000)
        with pytest.raises(Exception) as err:
            await waiting.result(timeout=5)
        assert "WaitTimeoutError" in str(err.value)


async def test_an_evicted_run_answers_a_query_after_replaying(backend: Backend) -> None:
    async with backend.engine(workflows=[parked], max_cached_runs=0) as engine:
        handle = await engine.start(parked, id="ev-query")
        await handle.update("add", "kept")
        await parked_and_evicted(engine, "ev-query")
        before = entered["ev-query"]
        assert await handle.query("got") == ["kept"]
        assert entered["ev-query"] == before + 1  # it was replayed to answer


async def test_an_evicted_run_is_cancelled(backend: Backend) -> None:
    async with backend.engine(workflows=[parked], max_cached_runs=0) as engine:
        handle = await engine.start(parked, id="ev-cancel")
        await parked_and_evicted(engine, "ev-cancel")
        await handle.cancel()
        with pytest.raises(WorkflowCancelledError):
            await handle.result(timeout=5)
        assert not engine.is_running_here("ev-cancel")


async def test_an_evicted_run_gets_its_review_decision(backend: Backend) -> None:
    async with backend.engine(workflows=[reviewed], max_cached_runs=0) as engine:
        handle = await engine.start(reviewed, id="ev-review")
        await eventually(lambda: evicted(engine, "ev-review"), what="evicted")
        (review,) = await engine.list_reviews(workflow_id="ev-review")
        await engine.submit_review(review.review_id, "approved", reviewer="ann")
        assert await handle.result(timeout=5) == "approved"


async def test_runs_beyond_the_cache_bound_are_evicted_and_the_rest_stay(backend: Backend) -> None:
    async with backend.engine(workflows=[parked], max_cached_runs=3) as engine:
        for i in range(8):
            await engine.start(parked, id=f"bound-{i}")
        await eventually(lambda: len(engine._core.residency.evicted) == 5, what="5 evicted")
        assert len(engine._core.runs) == 3
        assert all(engine.is_running_here(f"bound-{i}") for i in range(8))
        for i in range(8):
            await engine.signal(f"bound-{i}", "go", i)
        for i in range(8):
            assert (await engine.get_handle(f"bound-{i}").result(timeout=5))["signal"] == i


busy_gate: asyncio.Event | None = None


@activity(name="hold_busy")
async def hold_busy() -> str:
    assert busy_gate is not None
    await busy_gate.wait()
    return "done"


@workflow(name="busy")
async def busy(ctx: WorkflowContext) -> str:
    return str(await ctx.run(hold_busy))


async def test_the_bound_counts_idle_runs_only() -> None:
    # Runs at work stay in memory whatever the bound, and do not push parked ones out.
    global busy_gate
    busy_gate = asyncio.Event()
    async with Engine(
        MemoryStorage(), workflows=[parked, busy], activities=[hold_busy], max_cached_runs=2
    ) as engine:
        working = [await engine.start(busy, id=f"work-{i}") for i in range(3)]
        for i in range(3):
            await engine.start(parked, id=f"idle-{i}")
            await eventually(lambda i=i: engine._core.runs[f"idle-{i}"].idle, what="parked")
        await eventually(lambda: evicted(engine, "idle-0"), what="the oldest idle run evicted")
        await asyncio.sleep(0.05)  # a wrong sweep would evict more by now
        assert [i for i in ("idle-1", "idle-2") if evicted(engine, i)] == []
        assert len(engine._core.runs) == 5  # three at work, two idle: the bound's two
        busy_gate.set()
        assert [await h.result(timeout=5) for h in working] == ["done"] * 3
        for i in range(3):
            await engine.signal(f"idle-{i}", "go", i)
            assert (await engine.get_handle(f"idle-{i}").result(timeout=5))["signal"] == i


async def test_a_restarted_engine_takes_parked_runs_without_replaying_them(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[parked], max_cached_runs=0) as engine:
        for i in range(5):
            await engine.start(parked, id=f"re-{i}")
        await parked_and_evicted(engine, *(f"re-{i}" for i in range(5)))
    entered.clear()
    async with backend.engine(workflows=[parked], max_cached_runs=0) as engine:
        assert all(engine.is_running_here(f"re-{i}") for i in range(5))
        assert sum(entered.values()) == 0  # open replayed none of them
        await engine.signal("re-2", "go", "two")
        assert (await engine.get_handle("re-2").result(timeout=5))["signal"] == "two"
        assert sum(entered.values()) == 1


class SlowReplayStorage(CountingStorage):
    """Holds the scan of one run's journal (its replay) once ``replaying`` names the run."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.replaying: str | None = None
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def scan(self, prefix: str, **kw: Any) -> list[tuple[str, bytes]]:
        if self.replaying is not None and prefix == keys.run_range(self.replaying)[0]:
            self.held.set()
            await self.release.wait()
        return await super().scan(prefix, **kw)


async def test_a_run_being_restored_is_running_here_throughout() -> None:
    # A restore first drops the run from the evicted set, then replays it: while the
    # replay reads the journal the run is in neither place, yet it is still ours.
    store = SlowReplayStorage(MemoryStorage())
    async with Engine(store, workflows=[parked], max_cached_runs=0) as engine:  # type: ignore[arg-type]
        await engine.start(parked, id="slow-restore")
        await parked_and_evicted(engine, "slow-restore")
        store.replaying = "slow-restore"
        engine._core.residency.wake("slow-restore")
        await asyncio.wait_for(store.held.wait(), 5)
        assert not evicted(engine, "slow-restore")  # mid-restore: neither evicted nor loaded
        assert engine.is_running_here("slow-restore")
        store.replaying = None
        store.release.set()
        await engine.signal("slow-restore", "go", 1)
        assert (await engine.get_handle("slow-restore").result(timeout=5))["signal"] == 1


async def test_a_signal_from_another_engine_wakes_an_evicted_run(backend: Backend) -> None:
    async with (
        backend.engine(workflows=[parked], max_cached_runs=0, poll_interval=0.05) as owner,
        backend.engine(workflows=[parked], role="client") as other,
    ):
        handle = await owner.start(parked, id="ev-remote")
        await parked_and_evicted(owner, "ev-remote")
        await other.signal("ev-remote", "go", "from afar")
        assert (await handle.result(timeout=5))["signal"] == "from afar"


@pytest.mark.parametrize("point", ["marking", "evicted", "restoring"])
async def test_no_signal_is_lost_whenever_it_lands_during_eviction(point: str) -> None:
    """Send at a forced point of evict/restore; the run gets it, and at every moment a
    park marker (what a restarted engine trusts) never hides a buffered signal."""
    store = GatedStorage(MemoryStorage())
    async with Engine(store, workflows=[parked], max_cached_runs=0, poll_interval=60) as engine:  # type: ignore[arg-type]
        store.hold = "park:" if point == "marking" else None
        handle = await engine.start(parked, id="race")
        asking = None
        if point == "marking":
            await store.held.wait()  # the marker write is in flight
        else:
            await parked_and_evicted(engine, "race")
            if point == "restoring":
                store.hold = "park:"  # the restore's delete of the marker
                asking = asyncio.create_task(handle.query("got"))  # a query restores it
                await store.held.wait()
        sending = asyncio.create_task(handle.signal("go", point))
        if point in ("marking", "restoring"):
            await asyncio.sleep(0)
            store.release.set()
        await sending
        if asking is not None:
            assert await asking == []
        raw_marker = await store.get("park:race")
        buffered = await store.scan("sig:race:go:")
        assert not (raw_marker is not None and buffered), "a park marker hides the signal"
        assert (await handle.result(timeout=5))["signal"] == point


async def test_a_signal_landing_while_a_wait_records_its_deadline_is_not_missed() -> None:
    """The wait looked (nothing), then writes its timeout record; the signal lands then.
    Nothing polls, so only looking after registering for news delivers it."""
    store = GatedStorage(MemoryStorage())
    store.hold = "wf:look:p:"
    async with Engine(store, workflows=[parked], poll_interval=60) as engine:  # type: ignore[arg-type]
        handle = await engine.start(parked, id="look")
        await store.held.wait()
        await handle.signal("go", "between")
        store.release.set()
        assert (await handle.result(timeout=5))["signal"] == "between"


async def test_max_cached_runs_must_be_a_non_negative_int() -> None:
    for bad in (-1, 1.5, "10"):
        with pytest.raises(ConfigurationError, match="max_cached_runs"):
            Engine("memory://", max_cached_runs=bad)  # type: ignore[arg-type]


async def test_an_update_stored_by_a_write_that_seemed_to_fail_reaches_its_evicted_run() -> None:
    # A write whose reply is lost (or whose caller was cancelled: a client gone) may be
    # stored after all. Nothing else wakes an evicted run for it, so the sender does.
    from pyweft import StorageError
    from pyweft.testing import FaultyStorage

    store = FaultyStorage(MemoryStorage())
    async with Engine(store, workflows=[parked], max_cached_runs=0) as engine:
        handle = await engine.start(parked, id="ev-unknown")
        await parked_and_evicted(engine, "ev-unknown")

        def the_update(ops: Sequence[Any]) -> bool:
            prefix = keys.update_prefix("ev-unknown")
            return any(isinstance(op, Put) and op.key.startswith(prefix) for op in ops)

        store.fail_nth_write(match=the_update, outcome_unknown=True)
        with pytest.raises(StorageError):
            await handle.update("add", "u1", idempotency_key="k")
        assert await handle.update("add", "u1", idempotency_key="k", timeout=10) == 1
        await handle.signal("go", 1)
        assert await handle.result(timeout=5) == {"signal": 1, "updates": ["u1"]}
