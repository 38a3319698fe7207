"""Engines of different code on one store: a run is driven only by an engine that can replay it.

A rolling deploy (or old-version workers kept on purpose) puts engines that
register different workflow types or versions on one store. None of them may
claim a run it cannot drive: an engine without the type (one that only sends
signals) or without the version leaves the run, and its claim, to one that has
them. One engine never adopts a run twice at once, whichever paths race.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pyweft import Engine, MemoryStorage, Storage, VirtualClock, WorkflowContext, activity, workflow
from pyweft.engine.ownership.claims import decode_holder, epoch_key, holder_key
from pyweft.engine.ownership.lease import decode_epoch
from pyweft.storage.base import Op
from pyweft.testing import FaultyStorage
from support.backends import postgres_schema, with_schema
from support.poll import eventually

executed: list[tuple[str, str]] = []
TTL, RENEW = 30.0, 5.0


@pytest.fixture(autouse=True)
def _reset() -> None:
    executed.clear()


@activity
async def work(version: str, what: str) -> str:
    executed.append((version, what))
    return what


def shared(version: str) -> Callable[..., Any]:
    @workflow(name="shared", version=version)
    async def flow(ctx: WorkflowContext) -> str:
        await ctx.run(work, version, "first")
        got = await ctx.wait_for_signal("go")
        await ctx.run(work, version, f"second {got}")
        return f"v{version} done {got}"

    return flow


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[Callable[[], str | Storage]]:
    """Makes the storage argument of engines that share one store (workflow-lease)."""
    if request.param == "memory":
        memory = MemoryStorage()
        yield lambda: memory
    else:
        with postgres_schema() as (url, schema):
            yield lambda: with_schema(url, schema)


def engine(storage: str | Storage, workflows: list[Callable[..., Any]], **kw: Any) -> Engine:
    kw.setdefault("clock", VirtualClock())
    return Engine(
        storage,
        workflows=workflows,
        ownership="workflow-lease",
        poll_interval=0.02,
        claim_ttl=TTL,
        claim_renew_interval=RENEW,
        **kw,
    )


async def _holder(e: Engine, workflow_id: str) -> str | None:
    raw = await e.storage.get(holder_key(workflow_id))
    holder = decode_holder(raw) if raw is not None else None
    return holder.engine_id if holder is not None else None


async def _started_then_left(storage: str | Storage, workflow_id: str = "r") -> None:
    """A v1 run past its first step, whose engine shut down (its claim released)."""
    async with engine(storage, [shared("1")]) as first:
        await first.start("shared", id=workflow_id)
        await eventually(lambda: len(executed) == 1, what="first step")


async def test_an_engine_without_the_workflow_type_never_claims_its_runs(
    store: Callable[[], str | Storage],
) -> None:
    await _started_then_left(store())
    async with engine(store(), []) as signaller:  # an engine used only to send signals
        assert await signaller.reclaim() == 0
        assert await signaller.recover_all() == 0
        assert await _holder(signaller, "r") is None  # nothing claimed
        await signaller.signal("r", "go", "s")
        async with engine(store(), [shared("1")]) as worker:  # the engine with the code
            assert await worker.result("r", timeout=10) == "v1 done s"
    assert executed == [("1", "first"), ("1", "second s")]


async def test_engines_of_two_versions_each_drive_only_their_own_runs(
    store: Callable[[], str | Storage],
) -> None:
    async with (
        engine(store(), [shared("1")]) as v1,
        engine(store(), [shared("2")], version_mismatch="raise") as v2,  # opens: v1 holds it
    ):
        await v1.start("shared", id="old")
        await v2.start("shared", id="new")
        await eventually(lambda: len(executed) == 2, what="first steps")
        assert await v2.reclaim() == 0 and await v1.reclaim() == 0
        assert await _holder(v2, "old") == v1.instance_id
        assert await _holder(v1, "new") == v2.instance_id
        await v2.signal("old", "go", "a")  # through the engine that cannot drive it
        await v1.signal("new", "go", "b")
        assert await v2.result("old", timeout=10) == "v1 done a"
        assert await v1.result("new", timeout=10) == "v2 done b"
    assert sorted(executed) == [
        ("1", "first"),
        ("1", "second a"),
        ("2", "first"),
        ("2", "second b"),
    ]


async def test_a_run_whose_version_left_with_its_engine_is_blocked_then_taken_by_an_old_worker(
    store: Callable[[], str | Storage],
) -> None:
    await _started_then_left(store(), "old")  # the last v1 engine of a rolling deploy stops
    async with engine(store(), [shared("2")]) as v2:
        assert await v2.reclaim() == 0  # not claimed: v2 cannot replay it
        await eventually(lambda: _status_is(v2, "old", "blocked"), what="old blocked")
        info = await v2.describe("old")
        assert info.error is not None and info.error.type == "VersionMismatchError"
        assert await _holder(v2, "old") is None
        await v2.signal("old", "go", "later")  # stored for it meanwhile
        async with engine(store(), [shared("1")]) as pinned:  # an old-version worker
            assert await pinned.result("old", timeout=10) == "v1 done later"
            assert (await v2.describe("old")).status == "completed"
    assert executed == [("1", "first"), ("1", "second later")]


async def test_a_blocked_run_is_picked_up_by_a_live_engine_with_its_version() -> None:
    storage = MemoryStorage()
    clock = VirtualClock()
    async with engine(storage, [shared("1")], clock=clock) as v1:
        await _started_then_left(storage, "old")
        async with engine(storage, [shared("2")]) as v2:
            await v2.reclaim()  # nobody held it: v2 blocks it instead of claiming it
            await eventually(lambda: _status_is(v2, "old", "blocked"), what="old blocked")
        # v1 was already running: its next claim cycle finds the blocked run of its version.
        clock.advance(RENEW)
        await eventually(lambda: v1.is_running_here("old"), what="v1 took it")
        await v1.signal("old", "go", "x")
        assert await v1.result("old", timeout=10) == "v1 done x"


async def test_version_mismatch_raise_never_takes_or_keeps_the_old_runs_claim() -> None:
    storage = MemoryStorage()
    clock_v2 = VirtualClock()
    async with engine(storage, [shared("1")]) as v1:
        await v1.start("shared", id="old")
        await eventually(lambda: len(executed) == 1, what="first step")
        async with engine(storage, [shared("2")], version_mismatch="raise", clock=clock_v2) as v2:
            clock_v2.advance(TTL + 2 * RENEW + 1)  # v2's view: v1 stopped renewing
            assert await v2.reclaim() == 0  # neither raises nor claims
            assert await _holder(v2, "old") == v1.instance_id
            assert not v2.is_running_here("old")
        await v1.signal("old", "go", "still mine")
        assert await v1.result("old", timeout=10) == "v1 done still mine"


async def test_an_engine_with_recover_false_never_reclaims_in_its_claim_cycle() -> None:
    storage = MemoryStorage()
    clock = VirtualClock()
    await _started_then_left(storage, "orphan")
    async with engine(storage, [shared("1")], recover=False, clock=clock) as quiet:
        await quiet.start("shared", id="mine")
        await eventually(lambda: len(executed) == 2, what="its own run's first step")
        for _ in range(2):  # a second renewal proves the first cycle (reclaim included) ended
            before = await storage.get(holder_key("mine"))
            clock.advance(RENEW)

            async def renewed(before: bytes | None = before) -> bool:
                return await storage.get(holder_key("mine")) != before

            await eventually(renewed, what="claim cycle")
        assert await _holder(quiet, "orphan") is None
        assert not quiet.is_running_here("orphan")
    async with engine(storage, [shared("1")], role="client") as client:
        await client.resume("orphan")  # a running run: nothing to do, and a client drives none
        assert not client.is_running_here("orphan")
        assert await _holder(client, "orphan") is None


async def test_two_paths_adopting_one_run_at_once_drive_it_once() -> None:
    """Bug: a wake-up and the reclaim scan both took the run; its next activity ran twice."""
    inner = MemoryStorage()
    faults = FaultyStorage(inner)
    async with engine(faults, [shared("1")]) as b:
        claim = faults.pause_next_write(match=_writes(holder_key("r")))
        async with engine(inner, [shared("1")], role="client") as client:
            await client.start("shared", id="r")  # its wake-up makes b adopt it
        await claim.reached()  # path 1 (the wake-up) is taking the claim
        step = faults.pause_next_write(match=_writes("wf:r:j:"))
        taken = await b.reclaim()  # path 2, while path 1 is under way
        claim.release()
        await step.reached()  # the first step's commit
        await eventually(  # path 1 has ended, whatever it did
            lambda: _absent(inner, "wake:r"), what="wake-up handled"
        )
        step.release()
        await b.signal("r", "go", "once")
        assert await b.result("r", timeout=10) == "v1 done once"
        epoch = await inner.get(epoch_key("r"))
    assert executed == [("1", "first"), ("1", "second once")]
    assert taken == 0
    assert epoch is not None and decode_epoch(epoch) == 1  # the claim was taken once


async def test_engines_of_two_versions_take_turns_on_one_sqlite_file_with_a_lease(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'deploy.db'}"

    def on_file(version: str) -> Engine:
        return Engine(url, workflows=[shared(version)], ownership="lease", clock=VirtualClock())

    async with on_file("1") as v1:
        await v1.start("shared", id="old")
        await eventually(lambda: len(executed) == 1, what="first step")
    async with on_file("2") as v2:  # the deploy: v2 takes the store
        await eventually(lambda: _status_is(v2, "old", "blocked"), what="old blocked")
        await v2.start("shared", id="new")
        await v2.signal("new", "go", "n")
        assert await v2.result("new", timeout=10) == "v2 done n"
        await v2.signal("old", "go", "o")
    async with on_file("1") as v1:  # rolled back (or an old worker) takes the old run
        assert await v1.result("old", timeout=10) == "v1 done o"
    assert executed.count(("1", "first")) == 1


def _writes(fragment: str) -> Callable[[list[Op]], bool]:
    def match(ops: list[Op]) -> bool:
        return any(op.key.startswith(fragment) for op in ops)

    return match


async def _absent(storage: Storage, key: str) -> bool:
    return await storage.get(key) is None


async def _status_is(e: Engine, workflow_id: str, status: str) -> bool:
    return (await e.describe(workflow_id)).status == status
