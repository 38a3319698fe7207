"""A fork never writes into its source's records: the answers it gives live under its
own update ids."""

from __future__ import annotations

import itertools

from pyweft import WorkflowContext, activity, workflow
from pyweft.engine.replay import keys
from support.backends import Backend
from support.poll import eventually

_counter = itertools.count(1)


@activity
async def stamp(payload: str) -> str:
    return f"{payload}#{next(_counter)}"


@workflow(name="answerer")
async def answerer(ctx: WorkflowContext) -> str:
    request = await ctx.wait_for_update("approve")
    stamped = await ctx.run(stamp, request.payload)
    await request.respond(stamped)
    await ctx.wait_for_signal("finish")
    return stamped


async def test_a_fork_replaying_an_update_step_does_not_answer_the_sources_update(
    backend: Backend,
) -> None:
    async with backend.engine(workflows=[answerer]) as engine:
        source = await engine.start(answerer, id="src")
        await eventually(lambda: engine.is_running_here("src"))
        first = await engine.update("src", "approve", "doc", timeout=5, idempotency_key="k")
        raw_id = await engine.storage.get(keys.update_idempotency("src", "k"))
        assert raw_id is not None
        update_id = raw_id.decode()

        fork = await engine.fork("src", from_step=1, id="forked")
        await eventually(lambda: engine.is_running_here("forked"))
        await engine.signal("forked", "finish")
        forked_answer = await fork.result(timeout=5)
        assert forked_answer != first  # the fork ran the activity again and answered

        # The caller's answer is the one it was given, by key and by id.
        assert await engine.update("src", "approve", "doc", timeout=5, idempotency_key="k") == first
        assert await engine.update_result(update_id) == first

        # The fork's answer is stored under its own update id, found through the fork.
        fork_ids = [
            keys.dec(k.rsplit(":", 1)[1])
            for k, _ in await engine.storage.scan(keys.run_updates_prefix("forked"))
        ]
        assert len(fork_ids) == 1 and fork_ids != [update_id]
        assert await engine.update_result(fork_ids[0]) == forked_answer
        assert (await fork.history())[0].result[0] == fork_ids[0]

        await engine.signal("src", "finish")
        assert await source.result(timeout=5) == first
        assert await engine.purge(id_prefix="forked") == 1
        assert await engine.update_result(update_id) == first  # the source's stays
        assert [k for k, _ in await engine.storage.scan("upr:")] == [
            keys.update_response(update_id)
        ]


async def test_a_fork_of_every_step_replays_the_answer_under_its_own_id(backend: Backend) -> None:
    async with backend.engine(workflows=[answerer]) as engine:
        await engine.start(answerer, id="src")
        await eventually(lambda: engine.is_running_here("src"))
        first = await engine.update("src", "approve", "doc", timeout=5)
        (row,) = await engine.storage.scan("upr:")
        backend.clock.advance(10)  # a rewritten answer would carry a later answered_at
        fork = await engine.fork("src", id="whole")
        await engine.signal("whole", "finish")
        assert await fork.result(timeout=5) == first  # every step reused: same answer
        assert await engine.storage.get(row[0]) == row[1]  # the source's record untouched
