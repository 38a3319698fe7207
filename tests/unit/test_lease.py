"""The store lease: codec edge cases and the protocol, on an injected clock."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator, Sequence

import pytest

from pyweft import (
    Engine,
    EngineDeposedError,
    LeaseAcquisitionTimeoutError,
    LeaseCorruptedError,
    LeaseLostWarning,
    LeaseNotHeldError,
    MemoryStorage,
    OwnershipModeMismatchError,
    StorageError,
    VirtualClock,
    WorkflowContext,
    workflow,
)
from pyweft.engine.ownership import check_mode_marker
from pyweft.engine.ownership.identity import Incarnation, boot_id, current, process_start
from pyweft.engine.ownership.lease import (
    EPOCH_KEY,
    HOLDER_KEY,
    MAX_EPOCH,
    Holder,
    LeaseManager,
    decode_epoch,
    decode_holder,
    encode_epoch,
    encode_holder,
)
from pyweft.storage.base import Expect, Op


def manager(storage: MemoryStorage, clock: VirtualClock, name: str, **kw: float) -> LeaseManager:
    return LeaseManager(
        storage,
        clock,
        name,
        ttl_s=kw.get("ttl", 30.0),
        renew_interval_s=kw.get("renew", 5.0),
        wait_timeout_s=kw.get("wait", 0.2),
        poll_interval_s=0.01,
    )


def test_epoch_codec_accepts_only_exact_in_range_values() -> None:
    assert decode_epoch(encode_epoch(1)) == 1
    assert decode_epoch(encode_epoch(MAX_EPOCH)) == MAX_EPOCH
    for bad in (b"", b"\x00" * 7, b"\x00" * 9, (0).to_bytes(8, "big"), (2**53).to_bytes(8, "big")):
        with pytest.raises(LeaseCorruptedError):
            decode_epoch(bad)
    with pytest.raises(LeaseCorruptedError):
        encode_epoch(MAX_EPOCH + 1)


def test_holder_codec_treats_anything_odd_as_garbage() -> None:
    good = Holder("a", 1000, 3)
    assert decode_holder(encode_holder(good)) == good
    for raw in (
        b"not json",
        b"[]",
        json.dumps({"holder_id": "a", "expires_at_ms": 1e20, "epoch": 1}).encode(),  # huge
        json.dumps({"holder_id": "a", "expires_at_ms": 2**60, "epoch": 1}).encode(),
        json.dumps({"holder_id": "", "expires_at_ms": 1, "epoch": 1}).encode(),
        json.dumps({"holder_id": "a", "expires_at_ms": 1, "epoch": 0}).encode(),
        json.dumps({"holder_id": "a", "expires_at_ms": -1, "epoch": 1}).encode(),
    ):
        assert decode_holder(raw) is None


async def test_acquire_mints_epoch_one_then_increments_on_each_transfer() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    a = manager(storage, clock, "a")
    await a.acquire()
    assert decode_epoch(await storage.get(EPOCH_KEY) or b"") == 1
    assert await a.release()
    b = manager(storage, clock, "b")
    await b.acquire()
    assert decode_epoch(await storage.get(EPOCH_KEY) or b"") == 2
    assert await storage.get(EPOCH_KEY) is not None  # never deleted
    await b.release()


async def test_a_live_holder_makes_others_wait_then_time_out() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    a = manager(storage, clock, "a")
    await a.acquire()
    b = manager(storage, clock, "b", wait=0.05)
    with pytest.raises(LeaseAcquisitionTimeoutError) as err:
        await b.acquire()
    assert err.value.held_by == "a" and err.value.waited_s >= 0.05
    await a.release()


async def test_expired_or_garbage_holders_are_taken_over() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    a = manager(storage, clock, "a")
    await a.acquire()
    a._stop_timer()  # a stalls: no more renewals
    clock.advance(31)
    b = manager(storage, clock, "b")
    await b.acquire()
    holder = decode_holder(await storage.get(HOLDER_KEY) or b"")
    assert holder is not None and holder.holder_id == "b"
    await storage.batch([_put(HOLDER_KEY, b'{"garbage": true}')])
    c = manager(storage, clock, "c")
    await c.acquire()
    assert decode_epoch(await storage.get(EPOCH_KEY) or b"") == 3


async def test_epoch_present_without_holder_is_a_normal_steal() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    await storage.batch([_put(EPOCH_KEY, encode_epoch(41))])
    a = manager(storage, clock, "a")
    await a.acquire()
    assert decode_epoch(a.epoch_bytes or b"") == 42


async def test_holder_without_epoch_or_bad_epoch_fails_closed() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    await storage.batch([_put(HOLDER_KEY, encode_holder(Holder("x", 1, 1)))])
    with pytest.raises(LeaseCorruptedError):
        await manager(storage, clock, "a").acquire()
    storage2 = MemoryStorage()
    await storage2.batch([_put(EPOCH_KEY, b"\x01")])
    with pytest.raises(LeaseCorruptedError):
        await manager(storage2, clock, "a").acquire()
    storage3 = MemoryStorage()
    await storage3.batch([_put(EPOCH_KEY, encode_epoch(MAX_EPOCH))])
    with pytest.raises(LeaseCorruptedError):
        await manager(storage3, clock, "a").acquire()


async def test_writes_before_the_lease_is_held_are_refused() -> None:
    lease = manager(MemoryStorage(), VirtualClock(), "a")
    with pytest.raises(LeaseNotHeldError):
        lease.conditions()


async def test_renewals_are_single_flight_and_keep_the_epoch() -> None:
    storage, clock = GatedStorage(), VirtualClock()
    a = manager(storage, clock, "a")
    await a.acquire()
    epoch = a.epoch_bytes
    storage.gate = asyncio.Event()
    clock.advance(5)  # renewal due: it blocks in storage
    await asyncio.sleep(0)
    clock.advance(5)  # due again while the first is in flight: skipped
    await asyncio.sleep(0)
    assert storage.held == 1
    storage.gate.set()
    await asyncio.sleep(0.01)
    assert not a.deposed and a.epoch_bytes == epoch
    assert decode_holder(await storage.get(HOLDER_KEY) or b"").expires_at_ms > 0  # type: ignore[union-attr]
    await a.release()


async def test_release_waits_for_a_renewal_in_flight() -> None:
    storage, clock = GatedStorage(), VirtualClock()
    a = manager(storage, clock, "a")
    await a.acquire()
    storage.gate = asyncio.Event()
    clock.advance(5)
    await asyncio.sleep(0)
    release = asyncio.ensure_future(a.release())
    await asyncio.sleep(0.01)
    assert not release.done()
    storage.gate.set()
    assert await release is True
    assert await storage.get(HOLDER_KEY) is None


async def test_a_storage_blip_during_renewal_only_warns() -> None:
    storage, clock = GatedStorage(), VirtualClock()
    a = manager(storage, clock, "a")
    await a.acquire()
    storage.fail = True
    await a.renew()
    assert not a.deposed
    storage.fail = False
    await a.release()


async def test_a_lost_renewal_deposes_with_a_warning() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    a = manager(storage, clock, "a")
    await a.acquire()
    await storage.batch([_put(HOLDER_KEY, encode_holder(Holder("b", 10**12, 2)))])
    with pytest.warns(LeaseLostWarning):
        await a.renew()
    assert a.deposed
    with pytest.raises(EngineDeposedError):
        a.conditions()


@workflow
async def tiny(ctx: WorkflowContext) -> int:
    return 1


async def test_a_zombie_engine_is_fenced_out_and_stops_itself() -> None:
    storage = MemoryStorage()
    clock_a, clock_b = VirtualClock(), VirtualClock()
    a = Engine(storage, workflows=[tiny], clock=clock_a, ownership="lease")
    await a.open()
    assert a.lease_health().state == "healthy"
    clock_b.advance(60)  # b's clock: a's lease has expired (a is "paused")
    b = Engine(storage, workflows=[tiny], clock=clock_b, ownership="lease", lease_wait_timeout=1)
    await b.open()
    assert b.lease_health().epoch == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(EngineDeposedError):
            await a.start(tiny)
    assert any(issubclass(w.category, LeaseLostWarning) for w in caught)
    for _ in range(5):
        await asyncio.sleep(0)
    assert a.lease_health().state == "contested"
    assert await (await b.start(tiny)).result(timeout=5) == 1
    await b.shutdown()
    await a.shutdown()


async def test_fencing_modes_must_not_share_a_store() -> None:
    storage = MemoryStorage()
    await check_mode_marker(storage, "lease", 0.0)
    await check_mode_marker(storage, "lease", 1.0)
    with pytest.raises(OwnershipModeMismatchError) as err:
        await check_mode_marker(storage, "workflow-lease", 2.0)
    assert err.value.stored_mode == "lease"


class GatedStorage(MemoryStorage):
    """Memory storage whose conditional batches can be held at a gate, or fail."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.held = 0
        self.fail = False

    async def conditional_batch(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> bool:
        if self.fail:
            raise StorageError("simulated blip")
        if self.gate is not None and not self.gate.is_set():
            self.held += 1
            await self.gate.wait()
        return await super().conditional_batch(conditions, ops)


def _put(key: str, value: bytes) -> Op:
    from pyweft.storage.base import Put

    return Put(key=key, value=value)


class LostReplyStorage(MemoryStorage):
    """Memory storage that commits the next conditional batch, then raises as if its
    reply had been lost on the way back (the outcome is unknown to the caller)."""

    def __init__(self) -> None:
        super().__init__()
        self.lose_next_reply = False

    async def conditional_batch(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> bool:
        ok = await super().conditional_batch(conditions, ops)
        if self.lose_next_reply:
            self.lose_next_reply = False
            raise StorageError("connection lost after commit (outcome unknown)")
        return ok


async def test_a_renewal_whose_reply_was_lost_does_not_depose_the_engine() -> None:
    storage, clock = LostReplyStorage(), VirtualClock()
    a = manager(storage, clock, "a")
    await a.acquire()
    clock.advance(5)
    storage.lose_next_reply = True
    await a.renew()  # committed, but a does not know it
    stored = decode_holder(await storage.get(HOLDER_KEY) or b"")
    assert stored is not None and stored.expires_at_ms == int((clock.now() + 30) * 1000)
    clock.advance(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a LeaseLostWarning would fail the test
        await a.renew()  # the stored record is a's own at a's epoch: renew on top of it
    assert not a.deposed
    assert a.health().state == "healthy"
    renewed = decode_holder(await storage.get(HOLDER_KEY) or b"")
    assert renewed is not None and renewed.expires_at_ms == int((clock.now() + 30) * 1000)
    assert await a.release()


async def test_a_record_at_another_epoch_still_deposes_even_with_our_holder_id() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    a = manager(storage, clock, "a")
    await a.acquire()
    # Someone minted epoch 2 with a record that merely carries a's name.
    await storage.batch(
        [
            _put(EPOCH_KEY, encode_epoch(2)),
            _put(HOLDER_KEY, encode_holder(Holder("a", 10**12, 2))),
        ]
    )
    with pytest.warns(LeaseLostWarning):
        await a.renew()
    assert a.deposed


def _incarnation(pid: int, engine_id: str = "shop") -> Incarnation:
    return Incarnation(
        engine_id=engine_id,
        instance_id=f"host:{pid}:x",
        host=socket.gethostname(),
        pid=pid,
        started=process_start(pid),
        boot=boot_id(),
    )


@pytest.fixture
def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: the pid names nobody now
    return proc.pid


@pytest.fixture
def live_pid() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


async def _held_by(storage: MemoryStorage, clock: VirtualClock, pid: int) -> None:
    old = Holder(f"host:{pid}:x", int((clock.now() + 30) * 1000), 1, _incarnation(pid))
    await storage.batch([_put(EPOCH_KEY, encode_epoch(1)), _put(HOLDER_KEY, encode_holder(old))])


async def test_a_live_lease_of_a_dead_earlier_incarnation_is_taken_back_at_once(
    dead_pid: int,
) -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    await _held_by(storage, clock, dead_pid)
    b = manager(storage, clock, "b", wait=0)
    b.identity = current("shop", "b")
    await b.acquire()  # no waiting for the 30 s TTL: the old process is gone
    assert b.health().epoch == 2
    stored = decode_holder(await storage.get(HOLDER_KEY) or b"")
    assert stored is not None and stored.owner is not None
    assert (stored.owner.engine_id, stored.owner.pid) == ("shop", os.getpid())
    await b.release()


async def test_a_dead_holder_of_another_engine_id_still_waits_for_its_ttl(dead_pid: int) -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    await _held_by(storage, clock, dead_pid)
    b = manager(storage, clock, "b", wait=0)
    b.identity = current("another-app", "b")
    with pytest.raises(LeaseAcquisitionTimeoutError):
        await b.acquire()


async def test_a_live_holder_with_the_same_engine_id_is_waited_for_and_named(
    live_pid: int, caplog: pytest.LogCaptureFixture
) -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    await _held_by(storage, clock, live_pid)
    b = manager(storage, clock, "b", wait=0.05)
    b.identity = current("shop", "b")
    caplog.set_level("INFO", logger="pyweft.lease")
    with pytest.raises(LeaseAcquisitionTimeoutError):
        await b.acquire()
    waiting = [m for r in caplog.records if "waiting for the store lease" in (m := r.getMessage())]
    assert len(waiting) == 1
    assert f"pid {live_pid}" in waiting[0] and "'shop'" in waiting[0] and "until" in waiting[0]


async def test_confirm_passes_a_lease_valid_past_the_margin_without_writing() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    a = manager(storage, clock, "a", ttl=30.0, renew=5.0)
    await a.acquire()
    holder = await storage.get(HOLDER_KEY)
    clock.advance(24.9)  # 5.1 s left: more than one renewal interval
    await a.confirm()
    assert await storage.get(HOLDER_KEY) == holder


async def test_confirm_renews_a_lease_near_its_expiry_before_a_step_starts() -> None:
    """The renewal timer did not run (a paused process, a busy loop): the lease has less
    than one renewal interval left by this engine's clock, so it is renewed on the spot."""
    storage, clock = MemoryStorage(), VirtualClock()
    a = manager(storage, clock, "a", ttl=30.0, renew=5.0)
    await a.acquire()
    a._stop_timer()  # time passes without the renewal timer firing (a paused process)
    clock.advance(26.0)
    await a.confirm()
    stored = decode_holder(await storage.get(HOLDER_KEY) or b"")
    assert stored is not None and stored.expires_at_ms == int((clock.now() + 30.0) * 1000)


async def test_confirm_on_a_lapsed_lease_taken_by_another_engine_deposes() -> None:
    storage, clock_a, clock_b = MemoryStorage(), VirtualClock(), VirtualClock()
    a = manager(storage, clock_a, "a", ttl=30.0, renew=5.0)
    await a.acquire()
    clock_b.advance(31)
    b = manager(storage, clock_b, "b", ttl=30.0, renew=5.0)
    await b.acquire()
    a._stop_timer()  # a was paused: its renewals never ran
    clock_a.advance(31.0)
    with pytest.warns(LeaseLostWarning), pytest.raises(EngineDeposedError):
        await a.confirm()
    assert a.deposed


async def test_confirm_raises_a_storage_error_when_the_lease_cannot_be_renewed() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    a = manager(storage, clock, "a", ttl=30.0, renew=5.0)
    await a.acquire()
    a._stop_timer()
    clock.advance(27.0)
    await storage.close()  # the store stops answering
    with pytest.raises(StorageError, match="could not confirm the store lease"):
        await a.confirm()
    assert not a.deposed
