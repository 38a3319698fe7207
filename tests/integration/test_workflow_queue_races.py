"""Workflow-queue races forced in a set order with a gated store (issue 14).

The dispatcher keeps what it knows of a queue's slots between passes and takes off
the runs of its own that ended. A run's end is stored (its slot deleted) before the
engine hears back; a read of the slots in between already leaves that slot out, so
taking the run off again when its end is heard of counts one slot free that is not.
The 500-run soak saw a sixth run start on a queue of five that way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyweft import Engine, Queue, WorkflowContext, workflow
from pyweft.engine.queues import layout
from pyweft.storage.base import Delete, Op
from support.backends import Backend
from support.gates import GatedStore, open_store
from support.poll import eventually


@workflow
async def held(ctx: WorkflowContext, name: str) -> str:
    """Holds its slot until signalled."""
    await ctx.wait_for_signal("go")
    return name


def _frees_slot(queue: str, run_id: str) -> Callable[[Sequence[Op]], bool]:
    slot = layout.slot(queue, "", run_id)

    def matches(ops: Sequence[Op]) -> bool:
        return any(isinstance(op, Delete) and op.key == slot for op in ops)

    return matches


async def _running(engine: Engine) -> int:
    groups = {g.key: g.count for g in await engine.aggregate(group_by="status")}
    return groups.get("running", 0)


async def _three_running(engine: Engine) -> bool:
    return await _running(engine) == 3


async def _started(engine: Engine, run_id: str) -> bool:
    return (await engine.describe(run_id)).status == "running"


async def test_a_run_whose_end_is_heard_of_after_a_read_of_the_slots_frees_one_slot(
    backend: Backend,
) -> None:
    queue = Queue("tight", concurrency=3)
    # Quiet (no notifications) and a long poll: the dispatcher reads the slots again only
    # when this test makes it, so the order below is the only one possible.
    store = GatedStore(open_store(backend), quiet=True)
    async with Engine(
        store,  # type: ignore[arg-type]
        workflows=[held],
        queues=[queue],
        clock=backend.clock,
        ownership="none",
        poll_interval=60,
    ) as engine:
        for name in ("a", "b", "s"):
            await engine.enqueue(queue, held, name, id=name)
        await eventually(lambda: _three_running(engine), what="a, b and s started")
        for name in ("c", "d"):
            await engine.enqueue(queue, held, name, id=name)
        await eventually(engine.quiescent, what="c and d left waiting")
        assert (await engine.queue_info("tight")).in_flight == 3

        # a ends: its end (and the deletion of its slot) is stored, the reply is late.
        late = store.hold(_frees_slot("tight", "a"), after=True)
        await engine.signal("a", "go")
        await late.reached.wait()
        # s stops without ending (suspended, it keeps its slot): the dispatcher reads the
        # slots again, sees b and s (a's slot is gone already) and starts c in a's place.
        await engine.suspend("s")
        await eventually(lambda: _started(engine, "c"), what="c started in a's slot")
        # Now the engine hears that a ended. Its slot was counted free by the read
        # above already: d must keep waiting.
        late.release.set()
        assert await engine.get_handle("a").result(timeout=5) == "a"
        await eventually(engine.quiescent, what="the dispatcher's pass after a's end")
        assert (await engine.describe("d")).status == "enqueued"
        assert (await engine.queue_info("tight")).in_flight == 3  # b, s, c
        await engine.resume("s")
        await eventually(engine.quiescent, what="s resumed")
        assert await _running(engine) == 3  # b, s, c: never more than the queue allows

        # The slots still come back as runs end: d starts when b ends.
        await engine.signal("b", "go")
        await eventually(lambda: _started(engine, "d"), what="d started in b's slot")
        for name in ("s", "c", "d"):
            await engine.signal(name, "go")
        results = [await engine.get_handle(n).result(timeout=5) for n in ("b", "s", "c", "d")]
        assert results == ["b", "s", "c", "d"]
        info = await engine.queue_info("tight")
        assert (info.depth, info.in_flight) == (0, 0)
