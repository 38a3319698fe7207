"""``pyweft.testing.FaultyStorage``: each kind of fault does what it says, and nothing more."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pyweft import Engine, MemoryStorage, WorkflowContext, activity, workflow
from pyweft.errors import InvalidArgumentError, StorageClosedError, StorageError
from pyweft.storage import Delete, Expect, Put, Storage
from pyweft.storage.base import Op
from pyweft.testing import (
    FaultyStorage,
    InjectedFaultError,
    StorageConformance,
)
from support.poll import eventually


def put(key: str, value: bytes = b"v") -> list[Op]:
    return [Put(key=key, value=value)]


def under(prefix: str):  # type: ignore[no-untyped-def]
    return lambda ops: any(op.key.startswith(prefix) for op in ops)


async def outcomes(faults: FaultyStorage, n: int) -> list[bool]:
    """Write ``n`` keys one by one; True where the write raised an injected fault."""
    raised = []
    for i in range(n):
        try:
            await faults.batch(put(f"k{i:05d}"))
        except InjectedFaultError:
            raised.append(True)
        else:
            raised.append(False)
    return raised


class TestTransparentFaultyStorageConformance(StorageConformance):
    """With no fault configured the wrapper is the store it wraps."""

    async def make_storage(self, tmp_path: Path) -> Storage:
        return FaultyStorage(MemoryStorage(), seed=1)


async def test_a_wrapper_with_no_faults_passes_every_call_through_and_counts_it() -> None:
    inner = MemoryStorage()
    faults = FaultyStorage(inner)
    await faults.batch(put("a", b"1") + put("b", b"2"))
    assert await faults.conditional_batch([Expect(key="a", value=b"1")], [Delete(key="a")])
    assert not await faults.conditional_batch([Expect(key="a", value=b"1")], put("c"))
    assert await faults.get("b") == b"2"
    assert await faults.scan("") == [("b", b"2")]
    assert await inner.scan("") == [("b", b"2")]
    counts = faults.counts
    assert (counts.reads, counts.writes) == (2, 3)
    assert counts.total == 0


async def test_a_failed_write_raises_and_never_reaches_the_inner_store() -> None:
    inner = MemoryStorage()
    faults = FaultyStorage(inner, write_failure_rate=1.0)
    with pytest.raises(InjectedFaultError, match="failed before reaching the store") as caught:
        await faults.batch(put("a"))
    with pytest.raises(InjectedFaultError):
        await faults.conditional_batch([Expect(key="a", value=None)], put("b"))
    assert isinstance(caught.value, StorageError)
    assert caught.value.outcome_unknown is False
    assert caught.value.operation == "batch"
    assert await inner.scan("") == []
    assert faults.counts.write_failures == 2
    assert faults.counts.lost_replies == 0


async def test_a_lost_reply_applies_the_write_and_then_raises() -> None:
    inner = MemoryStorage()
    faults = FaultyStorage(inner, lost_reply_rate=1.0)
    with pytest.raises(InjectedFaultError, match="outcome unknown") as caught:
        await faults.batch(put("a", b"1"))
    with pytest.raises(InjectedFaultError):
        await faults.conditional_batch([Expect(key="a", value=b"1")], put("b", b"2"))
    assert caught.value.outcome_unknown is True
    assert await inner.scan("") == [("a", b"1"), ("b", b"2")]
    assert faults.counts.lost_replies == 2
    assert faults.counts.write_failures == 0


async def test_failed_reads_raise_for_get_scan_and_count() -> None:
    inner = MemoryStorage()
    await inner.batch(put("a"))
    faults = FaultyStorage(inner, read_failure_rate=1.0)
    with pytest.raises(InjectedFaultError, match="get #1"):
        await faults.get("a")
    with pytest.raises(InjectedFaultError, match="scan #2"):
        await faults.scan("")
    with pytest.raises(InjectedFaultError, match="count #3"):
        await faults.count("")
    await faults.batch(put("b"))  # writes are not affected by the read rate
    assert faults.counts.read_failures == 3
    assert faults.counts.errors == 3


async def test_a_fraction_of_writes_fail_and_the_counters_match_what_callers_saw() -> None:
    faults = FaultyStorage(MemoryStorage(), seed=11, write_failure_rate=0.2, lost_reply_rate=0.1)
    raised = await outcomes(faults, 2000)
    counts = faults.counts
    assert counts.writes == 2000
    assert counts.write_failures + counts.lost_replies == sum(raised)
    # 2000 draws at 20% and 10%: far from both "none" and "all".
    assert 300 < counts.write_failures < 500
    assert 120 < counts.lost_replies < 280
    stored = {k for k, _ in await faults.inner.scan("")}
    assert len(stored) == 2000 - counts.write_failures  # lost replies were applied


async def test_the_same_seed_meets_the_same_faults_and_another_seed_does_not() -> None:
    def make(seed: int) -> FaultyStorage:
        return FaultyStorage(MemoryStorage(), seed=seed, write_failure_rate=0.1)

    first, again, other = await outcomes(make(5), 500), await outcomes(make(5), 500), None
    other = await outcomes(make(6), 500)
    assert any(first)
    assert first == again
    assert first != other


async def test_changing_rates_does_not_shift_which_calls_the_seed_picks() -> None:
    plain = FaultyStorage(MemoryStorage(), seed=3, write_failure_rate=0.1)
    delayed = FaultyStorage(
        MemoryStorage(), seed=3, write_failure_rate=0.1, delay_rate=0.5, max_delay_s=0.0001
    )
    assert await outcomes(plain, 300) == await outcomes(delayed, 300)


async def test_heal_stops_every_fault_and_keeps_the_counters() -> None:
    faults = FaultyStorage(MemoryStorage(), read_failure_rate=1.0, write_failure_rate=1.0)
    armed = faults.fail_nth_write(2)
    with pytest.raises(InjectedFaultError):
        await faults.batch(put("a"))
    faults.heal()
    for i in range(20):
        await faults.batch(put(f"h{i}"))
        assert await faults.get(f"h{i}") == b"v"
    assert not armed.fired
    assert faults.counts.write_failures == 1
    faults.configure(write_failure_rate=1.0)  # faults can be turned on again
    with pytest.raises(InjectedFaultError):
        await faults.batch(put("z"))


async def test_the_nth_matching_write_fails_and_no_other() -> None:
    faults = FaultyStorage(MemoryStorage())
    armed = faults.fail_nth_write(3, match=under("j/"))
    await faults.batch(put("j/1"))
    await faults.batch(put("x/1"))
    await faults.batch(put("j/2"))
    await faults.batch(put("x/2"))
    assert not armed.fired
    with pytest.raises(InjectedFaultError, match="fail_nth_write"):
        await faults.batch(put("j/3"))
    assert armed.fired
    await faults.batch(put("j/4"))
    keys = [k for k, _ in await faults.inner.scan("")]
    assert keys == ["j/1", "j/2", "j/4", "x/1", "x/2"]
    assert faults.counts.write_failures == 1


async def test_an_armed_write_fault_can_lose_the_reply_of_an_applied_write() -> None:
    faults = FaultyStorage(MemoryStorage())
    faults.fail_nth_write(match=under("j/"), outcome_unknown=True)
    with pytest.raises(InjectedFaultError) as caught:
        await faults.conditional_batch([Expect(key="j/1", value=None)], put("j/1"))
    assert caught.value.outcome_unknown
    assert await faults.get("j/1") == b"v"
    assert faults.counts.lost_replies == 1


async def test_the_nth_matching_read_fails() -> None:
    faults = FaultyStorage(MemoryStorage())
    armed = faults.fail_nth_read(2, match=lambda key: key.startswith("r/"))
    assert await faults.get("r/1") is None
    assert await faults.scan("other/") == []
    with pytest.raises(InjectedFaultError, match="fail_nth_read"):
        await faults.scan("r/")
    assert armed.fired
    assert await faults.get("r/1") is None
    assert faults.counts.read_failures == 1


async def test_a_cancelled_armed_fault_never_fires() -> None:
    faults = FaultyStorage(MemoryStorage())
    armed = faults.fail_nth_write(1)
    armed.cancel()
    await faults.batch(put("a"))
    assert not armed.fired
    assert faults.counts.errors == 0


async def test_a_paused_write_waits_for_the_test_then_goes_through_when_released() -> None:
    faults = FaultyStorage(MemoryStorage())
    pause = faults.pause_next_write(match=under("j/"))
    held = asyncio.create_task(faults.batch(put("j/1")))
    await pause.reached()
    assert pause.ops == put("j/1")
    assert await faults.get("j/1") is None  # held before the store
    await faults.batch(put("x/1"))  # other writes keep flowing
    assert not held.done()
    pause.release()
    await held
    assert await faults.get("j/1") == b"v"
    assert faults.counts.pauses == 1


@pytest.mark.parametrize("outcome_unknown", [False, True])
async def test_a_paused_write_can_be_failed_before_or_after_it_is_applied(
    outcome_unknown: bool,
) -> None:
    faults = FaultyStorage(MemoryStorage())
    pause = faults.pause_next_write()
    held = asyncio.create_task(faults.conditional_batch([Expect(key="a", value=None)], put("a")))
    await pause.reached()
    assert pause.conditions == [Expect(key="a", value=None)]
    pause.fail(outcome_unknown=outcome_unknown)
    with pytest.raises(InjectedFaultError, match=r"PausedWrite\.fail") as caught:
        await held
    assert caught.value.outcome_unknown is outcome_unknown
    assert (await faults.get("a") is not None) is outcome_unknown


async def test_a_write_decided_before_it_arrives_is_not_held() -> None:
    faults = FaultyStorage(MemoryStorage())
    pause = faults.pause_next_write()
    pause.fail()
    with pytest.raises(InjectedFaultError):
        await faults.batch(put("a"))
    assert pause.is_reached


async def test_heal_releases_a_held_write() -> None:
    faults = FaultyStorage(MemoryStorage())
    pause = faults.pause_next_write()
    pending = faults.pause_next_write(match=under("never/"))
    held = asyncio.create_task(faults.batch(put("a")))
    await pause.reached()
    faults.heal()
    await held
    assert await faults.get("a") == b"v"
    await faults.batch(put("never/1"))  # the pause not yet reached was dropped
    assert not pending.is_reached


async def test_delays_slow_calls_down_without_changing_their_results() -> None:
    faults = FaultyStorage(MemoryStorage(), seed=2, delay_rate=1.0, max_delay_s=0.001)
    await faults.batch(put("a"))
    assert await faults.get("a") == b"v"
    assert await faults.scan("") == [("a", b"v")]
    assert faults.counts.delays == 3
    assert faults.counts.errors == 0


async def test_optional_extensions_of_the_inner_store_pass_through() -> None:
    inner = MemoryStorage()
    faults = FaultyStorage(inner)
    heard: list[str] = []
    unlisten = await faults.listen("topic", lambda: heard.append("topic"))
    await inner.notify("topic")
    await faults.notify("topic")
    await eventually(lambda: heard == ["topic", "topic"], what="both notifications")
    await unlisten()
    await faults.batch(put("a") + put("b"))
    assert await faults.count("") == 2
    assert faults.capabilities is inner.capabilities


class Bare:
    """A minimal store without the optional ``count``/``listen``/``notify``."""

    def __init__(self) -> None:
        self.inner = MemoryStorage()
        self.capabilities = self.inner.capabilities
        self.get = self.inner.get
        self.scan = self.inner.scan
        self.batch = self.inner.batch
        self.conditional_batch = self.inner.conditional_batch
        self.close = self.inner.close


async def test_extensions_the_inner_store_lacks_are_absent_from_the_wrapper() -> None:
    faults = FaultyStorage(Bare())  # type: ignore[arg-type]
    assert getattr(faults, "count", None) is None
    assert getattr(faults, "listen", None) is None
    assert isinstance(faults, Storage)


async def test_closing_the_wrapper_closes_the_inner_store() -> None:
    inner = MemoryStorage()
    faults = FaultyStorage(inner)
    await faults.close()
    with pytest.raises(StorageClosedError):
        await inner.get("a")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("read_failure_rate", 1.5),
        ("write_failure_rate", -0.1),
        ("lost_reply_rate", float("nan")),
        ("delay_rate", True),
        ("max_delay_s", float("inf")),
        ("max_delay_s", -1),
    ],
)
async def test_a_bad_rate_is_refused_naming_the_option_and_changes_nothing(
    option: str, value: float
) -> None:
    with pytest.raises(InvalidArgumentError, match=option):
        FaultyStorage(MemoryStorage(), **{option: value})
    faults = FaultyStorage(MemoryStorage(), write_failure_rate=0.25)
    with pytest.raises(InvalidArgumentError, match=option):
        faults.configure(**{"read_failure_rate": 0.5, option: value})
    raised = await outcomes(faults, 200)
    assert 20 < sum(raised) < 80  # still 25%
    for _ in range(50):  # the refused call's read rate (0.5) was not kept either
        await faults.get("k00001")
    assert faults.counts.read_failures == 0


async def test_write_rates_that_sum_past_one_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="must not exceed 1"):
        FaultyStorage(MemoryStorage(), write_failure_rate=0.6, lost_reply_rate=0.6)


async def test_wrapping_something_that_is_not_a_store_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="wraps a Storage"):
        FaultyStorage("memory://")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="seed must be an int"):
        FaultyStorage(MemoryStorage(), seed="7")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="n must be an int"):
        FaultyStorage(MemoryStorage()).fail_nth_write(0)


@activity
async def double(x: int) -> int:
    return 2 * x


@workflow(name="faulty_doubler")
async def doubler(ctx: WorkflowContext, x: int) -> int:
    return await ctx.run(double, await ctx.run(double, x))


async def test_an_engine_runs_on_the_wrapper_and_a_held_write_holds_back_the_start() -> None:
    faults = FaultyStorage(MemoryStorage())
    async with Engine(faults, workflows=[doubler]) as engine:
        before = faults.counts.writes
        handle = await engine.start(doubler, 5, id="d")
        assert await handle.result(timeout=5) == 20
        assert faults.counts.writes > before
        pause = faults.pause_next_write(match=lambda ops: any("d2" in op.key for op in ops))
        starting = asyncio.create_task(engine.start(doubler, 1, id="d2"))
        await pause.reached()
        assert not starting.done()  # a start is acknowledged only once its write landed
        pause.release()
        assert await (await starting).result(timeout=5) == 4
