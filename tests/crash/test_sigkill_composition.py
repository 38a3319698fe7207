"""SIGKILL during ``ctx.all``, ``ctx.race``, child workflows and saga compensation.

"Crash tests with SIGKILL during all, race, children and saga compensation
show no completed branch is repeated and no compensation is skipped or run
twice."

Each test runs a campaign (``crashkit_composition.campaign``): a real worker
process (``composition_worker.py``) drives its runs on one SQLite file and is
SIGKILLed at a seeded random moment, ``KILLS`` times; after every kill, with
no process writing, the test reads the whole store (``Engine(recover=False)``:
every run, its state and its journal). Then a last worker runs everything to
the end and checks every outcome itself.

Every activity writes ``BEGIN`` before its work and ``END`` (``FAIL`` for the
saga's failing step, ``STOP`` for a cancelled race loser) after it, one fsynced
``O_APPEND`` write per line, so file order is real-time order. The checks
shared by all four tests (``crashkit_composition.check_calls`` and
``stability_problems``) are the durability rule, stated strictly:

A. **Committed means never again.** If a call's step is in the journal read
   after kill ``k``, no execution of that call begins in any later lifetime.
   Independently: no execution begins after the first ``MARK`` line proving its
   phase passed (the workflow writes it once the phase returned, which the
   engine allows only after the commit), and the journal record's
   ``finished_at`` is not earlier than the ``BEGIN`` of the call's last
   execution (so that last execution is the committed one, and every earlier
   one was never committed).
B. **Only a kill causes a re-run.** Nothing is retried (``max_attempts=1``), so
   an execution is followed by another only if its process was SIGKILLed and
   the next one is in a later process; an execution without an outcome belongs
   to a killed process.
C. **Committed records are immutable and runs are created once.** Every step
   record seen after a kill is identical in every later read, and every run
   keeps the ``created_at`` it was first seen with.
D. **The end state is the plan.** Every run ends as planned, and its journal
   is exactly the planned steps (nothing missing, extra or left open), race
   losers included: a losing branch cancelled while its open-step record was
   being written must not leave that record behind (the last test pins this).

Reproduce one seed with ``PYWEFT_CRASH_SEEDS=23 pytest tests/crash/test_sigkill_composition.py``.
The kill delays replay exactly; thread scheduling does not, so a seed
reproduces the conditions, not every interleaving.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pyweft import Engine, SQLiteStorage, WorkflowContext, workflow
from pyweft.storage import Delete, Expect, Put
from support import crashkit as kit
from support import crashkit_composition as kc

SEEDS = kit.crash_seeds(11, 23)
KILLS = 5  # per seed and test: 4 tests x 2 seeds x 5 = 40 SIGKILLs
DELAY_S = (0.03, 0.6)  # counted from the worker's START line (imports done, engine not open)


def _where(seed: int) -> str:
    return f"seed {seed} (rerun with PYWEFT_CRASH_SEEDS={seed})"


def _finish(seed: int, c: kc.Campaign, problems: list[str], summary: str) -> None:
    assert len(c.killed) == KILLS
    assert not problems, f"{_where(seed)}: {len(problems)} problem(s):\n" + "\n".join(problems[:30])
    print(f"{_where(seed)}: {len(c.killed)} kills; {summary}")


def _stats_line(stats: kc.CallStats, n_calls: int) -> str:
    return (
        f"{stats.executions} executions of {n_calls} calls, {stats.reruns_in_flight} re-runs of "
        f"calls cut mid-work, {stats.reruns_after_end} re-runs of calls whose commit was cut"
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_during_all_never_reruns_a_committed_branch(tmp_path: Path, seed: int) -> None:
    """``ctx.all`` / ``ctx.all_keyed`` over 2-5 async and sync activities per phase.

    Asserted: A-D above, for every branch. In particular a branch that committed
    while its siblings were still running (a kill mid-fan-out) is replayed from
    the journal, not run again, and every run returns the value computed from
    its plan. Also asserted: at least one kill left a fan-out half committed.
    """
    ids = [f"run-{i}" for i in range(8)]
    c = kc.campaign(tmp_path, "all", seed, len(ids), KILLS, DELAY_S)
    problems = list(c.problems)
    calls: list[kc.Call] = []
    phases: dict[tuple[str, str], list[int]] = defaultdict(list)  # (run, phase) -> steps
    for run_id in ids:
        journal, result = kc.fan_journal(run_id, seed)
        view = c.final.get(run_id)
        if view is None or (view.info.status, view.info.result) != ("completed", result):
            problems.append(f"{run_id}: ended as {view and view.info}, expected result {result}")
        problems += kc.journal_problems(run_id, view, journal)
        calls += kc.calls_of(journal, run_id)
        for e in journal:
            phases[(run_id, (e.token or "")[len(run_id) + 1 :][:3])].append(e.step)
    if set(c.final) != set(ids):
        problems.append(f"unexpected runs in the store: {sorted(set(c.final) - set(ids))}")
    stats = kc.check_calls(kit.read_ledger(tmp_path / "ledger.txt"), calls, c)
    problems += stats.problems

    def half_done(snap: dict[str, kc.RunView]) -> bool:
        return any(
            0 < sum(snap[r].record(s) is not None for s in steps) < len(steps)
            for (r, _), steps in phases.items()
            if r in snap
        )

    mid_fan_out = sum(half_done(snap) for snap in c.after_kill)
    if not mid_fan_out:
        problems.append("no kill landed while a fan-out was partly committed")
    _finish(seed, c, problems, f"{mid_fan_out} mid-fan-out; " + _stats_line(stats, len(calls)))


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_during_race_keeps_the_recorded_winner_and_never_commits_a_loser(
    tmp_path: Path, seed: int
) -> None:
    """Phase 1 waits for signals ``ready`` and ``go``, then races ``sleep(0)`` against a
    second wait for ``go`` (on the live path both settle in the same loop turn, so the
    losing wait has already taken the buffered signal when the race is decided), then
    races a wait for ``late`` against a sleep; phases 2.. race an async or sync activity
    against a sleep (``race_keyed`` and ``race``). The worker sends ``go`` twice, then
    ``ready``, at once, and ``late`` once (signal ids make resends no-ops): early for a
    third of the runs, only once the ``late`` race was journaled for another third, close
    to the sleep's end for the rest.

    Asserted, besides A-D (D includes: exactly the winner's branch step and the race record
    are journaled, a losing branch has no record at all):

    * the value each run returned is the recorded winner's (the result equals the one
      rebuilt from the journal's race records);
    * a losing activity is never committed and never begins again once its race committed
      (A applies to it), though it may have run, or been cancelled, before;
    * a signal wait that lost consumed nothing: the plain wait after it returns that same
      signal, and the journal shows each of the four signals consumed exactly once, in
      order;
    * both outcomes occurred for the ``late`` race and for the activity races.
    """
    ids = [f"run-{i}" for i in range(9)]
    c = kc.campaign(tmp_path, "race", seed, len(ids), KILLS, DELAY_S)
    problems = list(c.problems)
    calls: list[kc.Call] = []
    zero_won: Counter[str] = Counter()
    signal_won: Counter[str] = Counter()
    act_won: Counter[str] = Counter()
    for run_id in ids:
        view = c.final.get(run_id)
        if view is None:
            problems.append(f"{run_id}: not in the store")
            continue
        journal, run_calls, result = kc.race_journal(run_id, seed, kc.race_winners(view.steps))
        if (view.info.status, view.info.result) != ("completed", result):
            problems.append(
                f"{run_id}: ended {view.info.status} with {view.info.result!r}; its race "
                f"records say {result!r}"
            )
        problems += kc.journal_problems(run_id, view, journal)
        consumed = [s.result for s in view.steps if s.kind == "signal"]
        sent = [kc.ready_payload(run_id), kc.go_payload(run_id, 1), kc.go_payload(run_id, 2)]
        sent.append(kc.late_payload(run_id))
        if consumed != sent:
            problems.append(f"{run_id}: signals consumed {consumed}, expected {sent}")
        calls += run_calls
        zero_won[result[1][0]] += 1
        signal_won[result[2][0]] += 1
        act_won.update(item[0] for item in result[3:])
    if set(c.final) != set(ids):
        problems.append(f"unexpected runs in the store: {sorted(set(c.final) - set(ids))}")
    stats = kc.check_calls(kit.read_ledger(tmp_path / "ledger.txt"), calls, c)
    problems += stats.problems
    if len(signal_won) != 2 or len(act_won) != 2:
        problems.append(f"a race outcome never occurred: {signal_won}, {act_won}")
    _finish(
        seed,
        c,
        problems,
        f"sleep(0) races {dict(zero_won)}, late-signal races {dict(signal_won)}, "
        f"activity races {dict(act_won)}, "
        f"{stats.losers_run} executions of losers; " + _stats_line(stats, len(calls)),
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_with_awaited_children_runs_each_child_once(tmp_path: Path, seed: int) -> None:
    """A parent runs activities, awaited children one at a time, and ``ctx.all`` over 2-3
    awaited children (``parent_close_policy="await"``), all in the same worker.

    Asserted, besides A-D for the parents' and the children's activities:

    * the store holds exactly the parents and the planned children, each child with the
      deterministic id ``{parent}/{step}``, its parent's id, created once (C: its
      ``created_at`` never changes across kills), completed with the planned journal;
    * each parent's child step records the child's result and the parent returns the
      value computed from every child's result;
    * at least one kill landed while a child was running.
    """
    ids = [f"run-{i}" for i in range(6)]
    c = kc.campaign(tmp_path, "children", seed, len(ids), KILLS, DELAY_S)
    problems = list(c.problems)
    calls: list[kc.Call] = []
    expected_ids: set[str] = set()
    for run_id in ids:
        journals, result = kc.children_journals(run_id, seed)
        expected_ids |= set(journals)
        for wid, journal in journals.items():
            view = c.final.get(wid)
            want = result if wid == run_id else journal[-1].result
            if view is None or (view.info.status, view.info.result) != ("completed", want):
                problems.append(f"{wid}: ended as {view and view.info}, expected result {want}")
            elif wid != run_id and view.info.parent_id != run_id:
                problems.append(f"{wid}: parent {view.info.parent_id!r}, expected {run_id!r}")
            problems += kc.journal_problems(wid, view, journal)
            calls += kc.calls_of(journal, wid)
    if set(c.final) != expected_ids:
        problems.append(
            f"runs in the store differ from the plan: extra {sorted(set(c.final) - expected_ids)}"
            f", missing {sorted(expected_ids - set(c.final))}"
        )
    stats = kc.check_calls(kit.read_ledger(tmp_path / "ledger.txt"), calls, c)
    problems += stats.problems
    children_running = sum(
        any(v.info.parent_id is not None and v.info.status == "running" for v in snap.values())
        for snap in c.after_kill
    )
    if not children_running:
        problems.append("no kill landed while a child was running")
    n_children = len(expected_ids) - len(ids)
    _finish(
        seed,
        c,
        problems,
        f"{n_children} children, {children_running} kills with children running; "
        + _stats_line(stats, len(calls)),
    )


def _compensation_order_problems(events: list[kit.Event], run_id: str) -> list[str]:
    """The boom step's committed failure, then undo 6, 7, 8 strictly one after another:
    every execution of a compensation begins after the previous one's committed END."""
    runs = kc.executions([e for e in events if e.run == run_id])
    chain = [kit.label(kc.BOOM_PHASE), *(kit.label(kc.undo_phase(p)) for p in (4, 3, 2))]
    problems = []
    for before, after in itertools.pairwise(chain):
        done = runs.get(f"{run_id}/{before}", [])
        last = done[-1].outcome if done else None
        starts = [x.begin for x in runs.get(f"{run_id}/{after}", [])]
        if last is None or any(b.index < last.index for b in starts):
            problems.append(f"{run_id}: {after} began before {before} finished for good")
    return problems


def _wait_for_compensation(worker: kit.WorkerProcess, ledger: Path) -> None:
    undo_labels = {kit.label(kc.undo_phase(p)) for p in kc.BOOKING_PHASES}
    kc.wait_for_line(
        worker, ledger, lambda e: e.kind == "BEGIN" and e.label in undo_labels, timeout=3.0
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_during_saga_compensation_runs_each_compensation_once_in_reverse(
    tmp_path: Path, seed: int
) -> None:
    """Each run sleeps a while (spreading the sagas over time), books three steps (async or
    sync; one compensation registered with ``add_compensation``), then a fourth step fails;
    the ``async with ctx.saga()`` block compensates with 50-100 ms async or sync activities.
    Each kill waits for a compensation to begin in that worker, then a seeded 0-150 ms.

    Asserted, besides A-D for bookings, the failing step and every compensation:

    * each compensation has exactly one journal record, completed, with the undo of the
      right booking, at the steps after the failure in reverse booking order (D), so none
      was skipped, and by A and B none ran to a committed end twice;
    * in the ledger the failure is final before any compensation begins, and each
      compensation begins only after the previous one's committed execution ended;
    * runs that catch the error return ``["rolled back", <the original message>]``; the
      others end ``failed`` with the original ``ActivityError``;
    * at least one kill landed while a saga was compensating (failure committed, not every
      compensation committed).
    """
    ids = [f"run-{i}" for i in range(12)]
    c = kc.campaign(
        tmp_path, "saga", seed, len(ids), KILLS, (0.0, 0.15), wait_first=_wait_for_compensation
    )
    problems = list(c.problems)
    events = kit.read_ledger(tmp_path / "ledger.txt")
    calls: list[kc.Call] = []
    undo_steps = [kc.undo_phase(p) for p in kc.BOOKING_PHASES]
    for run_id in ids:
        journal = kc.trip_journal(run_id, seed)
        view = c.final.get(run_id)
        message = kc.boom_message(run_id)
        if view is None:
            problems.append(f"{run_id}: not in the store")
        elif kc.trip_plan(run_id, seed).catch:
            if (view.info.status, view.info.result) != ("completed", ["rolled back", message]):
                problems.append(f"{run_id}: ended as {view.info}, expected the rolled-back marker")
        elif (
            view.info.status != "failed"
            or view.info.error is None
            or view.info.error.type != "ActivityError"
            or not view.info.error.message.endswith(f"RuntimeError: {message}")
        ):
            problems.append(f"{run_id}: ended as {view.info}, expected the original failure")
        problems += kc.journal_problems(run_id, view, journal)
        problems += _compensation_order_problems(events, run_id)
        calls += kc.calls_of(journal, run_id)
    if set(c.final) != set(ids):
        problems.append(f"unexpected runs in the store: {sorted(set(c.final) - set(ids))}")
    stats = kc.check_calls(events, calls, c)
    problems += stats.problems

    def compensating(snap: dict[str, kc.RunView]) -> bool:
        return any(
            v.record(kc.BOOM_PHASE) is not None
            and not all(v.record(s) is not None for s in undo_steps)
            for v in snap.values()
        )

    mid_compensation = sum(compensating(snap) for snap in c.after_kill)
    if not mid_compensation:
        problems.append("no kill landed while a saga was compensating")
    _finish(
        seed,
        c,
        problems,
        f"{mid_compensation} kills mid-compensation; " + _stats_line(stats, len(calls)),
    )


# --- an engine bug found by the race test -------------------------------------------------


class _SlowWrites:
    """A real :class:`SQLiteStorage` whose writes return 30 ms after they are durable (a slow
    disk's fsync). Reads are not slowed. Nothing in the engine is patched."""

    def __init__(self, inner: SQLiteStorage) -> None:
        self._inner = inner
        self.capabilities = inner.capabilities

    async def get(self, key: str) -> bytes | None:
        return await self._inner.get(key)

    async def scan(self, prefix: str, **options: Any) -> list[tuple[str, bytes]]:
        return await self._inner.scan(prefix, **options)

    async def batch(self, ops: Sequence[Put | Delete]) -> None:
        await self._inner.batch(ops)
        await asyncio.sleep(0.03)

    async def conditional_batch(
        self, conditions: Sequence[Expect], ops: Sequence[Put | Delete]
    ) -> bool:
        applied = await self._inner.conditional_batch(conditions, ops)
        await asyncio.sleep(0.03)
        return applied

    async def close(self) -> None:
        await self._inner.close()


async def test_race_loser_cancelled_mid_commit_leaves_no_open_step(tmp_path: Path) -> None:
    """A signal wait whose signal is already buffered races a 10 s sleep. The wait settles
    at once; the sleep branch is then still awaiting the write of its pending record, and
    the race cancels it there. The write lands anyway (cancelling a caller does not withdraw
    a batch handed to the store), so the run must clean it up when it finishes. On plain
    SQLite the same happens to about a quarter of such runs, depending on timing."""

    @workflow(name="signal_or_nap")
    async def signal_or_nap(ctx: WorkflowContext) -> str:
        key, _ = await ctx.race_keyed({"signal": ctx.wait_for_signal("go"), "nap": ctx.sleep(10)})
        return key

    storage = _SlowWrites(SQLiteStorage(tmp_path / "pyweft.db"))
    try:
        async with Engine(storage, workflows=[signal_or_nap]) as engine:
            handle, _ = await engine.start_or_signal(signal_or_nap, signal=("go", 1), id="r")
            assert await handle.result(timeout=10) == "signal"
            steps = [(s.step, s.kind, s.status) for s in await engine.history("r")]
    finally:
        await storage.close()  # the engine does not close a storage it was handed
    assert steps == [(1, "signal", "completed"), (3, "race", "completed")]
