"""``ctx.all`` and ``ctx.race``: fan out over steps that run concurrently.

Branches are steps (activities, sleeps, signal waits, children...) whose step
numbers were taken when they were called, so numbering does not depend on
how they interleave.

* ``all``: every branch commits its own outcome as soon as it finishes, so a
  branch that finished stays done even when a sibling fails; the first
  failure (by branch order) is raised once every branch has settled.
* ``race``: branch commits are held back; the first branch to settle wins and
  only its outcome is committed, together with a race record naming the
  winner. Losers are cancelled (activities see cancellation, sleeps are
  disarmed) and a losing signal wait consumes nothing. Replay reads the
  winner from the race record and never runs the losers.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Awaitable, Sequence
from typing import Any

from pyweft.engine.replay import keys
from pyweft.engine.replay.operations import discard, guarded
from pyweft.engine.replay.records import StepRecord
from pyweft.engine.replay.run import RACE_BRANCH, RACE_PENDINGS, Deferred, Run, Superseded
from pyweft.storage.base import Delete, Op


def _coroutine(aw: Awaitable[Any]) -> Any:
    if asyncio.iscoroutine(aw):
        return aw

    async def wrap() -> Any:
        return await aw

    return wrap()


def _mark(finished: list[int], index: int, _task: asyncio.Task[Any]) -> None:
    finished.append(index)


@guarded
async def all_keyed(run: Run, branches: dict[str, Awaitable[Any]]) -> dict[str, Any]:
    values = await all_of(run, list(branches.values()))
    return dict(zip(branches, values, strict=True))


@guarded
async def race_value(run: Run, step: int, branches: Sequence[Awaitable[Any]]) -> Any:
    _, value = await race(run, step, branches)
    return value


@guarded
async def race_keyed(run: Run, step: int, branches: dict[str, Awaitable[Any]]) -> tuple[str, Any]:
    index, value = await race(run, step, list(branches.values()))
    return list(branches)[index], value


@guarded
async def all_of(run: Run, branches: Sequence[Awaitable[Any]]) -> list[Any]:
    """Results of every branch, in branch order; raises the first failure after all settle."""
    tasks = [asyncio.ensure_future(b) for b in branches]
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return list(outcomes)


async def race(run: Run, step: int, branches: Sequence[Awaitable[Any]]) -> tuple[int, Any]:
    """(index, value) of the first branch to settle; its failure is raised."""
    codec = run.services.codec
    rec = run.replay(step, "race", "race")
    if rec is not None:
        winner = int(codec.decode(rec.value or b"\x00"))
        for i, branch in enumerate(branches):
            if i != winner:
                discard(branch)
        return winner, await branches[winner]
    await run.enter_live()
    started = run.services.clock.now()
    loop = asyncio.get_running_loop()
    held: list[Deferred] = []
    opened: list[set[int]] = []  # steps each branch wrote progress records for
    tasks: list[asyncio.Task[Any]] = []
    finished: list[int] = []
    for i, branch in enumerate(branches):
        collected: Deferred = []
        held.append(collected)
        opened.append(set())
        context = contextvars.copy_context()
        context.run(RACE_BRANCH.set, collected)
        context.run(RACE_PENDINGS.set, (*RACE_PENDINGS.get(), opened[i]))
        task = loop.create_task(_coroutine(branch), context=context)
        task.add_done_callback(functools.partial(_mark, finished, i))
        tasks.append(task)
    run.child_waits += 1  # waiting only for the branches (each counted on its own)
    try:
        await run.live(asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        run.child_waits -= 1
    winner = finished[0]
    for i, task in enumerate(tasks):
        if i != winner:
            task.cancel()
    await asyncio.gather(*(t for i, t in enumerate(tasks) if i != winner), return_exceptions=True)
    record = StepRecord(
        step=step,
        kind="race",
        name="race",
        ok=True,
        started_at=started,
        finished_at=run.services.clock.now(),
        value=codec.encode(winner),
    )
    # The losers' open steps will never run again (replay takes the winner): their
    # progress records go with the race's record. (finish() deletes them again, in case
    # a loser's write was still in flight and lands later.)
    losers_open = sorted(set().union(*(s for i, s in enumerate(opened) if i != winner)))
    cleanup: list[Op] = [Delete(key=keys.pending(run.id, step)) for step in losers_open]
    entries: Deferred = [*held[winner], (record, cleanup, [])]
    outer = RACE_BRANCH.get()
    if outer is not None:  # a race inside a race branch: the outer race decides
        outer.extend(entries)
    elif not await run.commit_steps(entries):
        # The winner's input (a signal) is gone from the store. In one engine that cannot
        # happen any more (signals.buffered keeps consumed signals out of the cache), so
        # someone else took it: the run is re-driven from its journal and races again.
        raise Superseded()
    return winner, tasks[winner].result()
