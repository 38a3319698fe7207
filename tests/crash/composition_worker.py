"""A worker process for the composition SIGKILL tests (``test_sigkill_composition.py``).

Usage: ``python composition_worker.py DB_PATH LEDGER_PATH N_RUNS SEED MODE``

Opens an engine on the SQLite file ``DB_PATH`` (recovering whatever an earlier,
killed worker left running), starts runs ``run-0`` ... ``run-{N_RUNS-1}`` of
the MODE's workflow (``all``, ``race``, ``children`` or ``saga``; see
``support/crashkit_composition.py``) with ``on_conflict="use_existing"``,
waits for every outcome, checks it, writes ``DONE`` to the ledger and exits 0.
In ``race`` mode it also signals each run ``go`` twice, ``ready``, and ``late``, when
the plan says, with signal ids so that a later lifetime's resend is a no-op. The
process-lifetime name written on every ledger line comes from
``$CRASHKIT_LIFETIME``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`

from pyweft import (
    ActivityError,
    Engine,
    RetryPolicy,
    WorkflowContext,
    WorkflowFailedError,
    WorkflowTerminalError,
    activity,
    workflow,
)
from support import crashkit as kit
from support import crashkit_composition as kc

ONCE = RetryPolicy(max_attempts=1)  # nothing is retried: every re-execution is a recovery
_ledger: kc.CompositionLedger | None = None


def ledger() -> kc.CompositionLedger:
    assert _ledger is not None
    return _ledger


# --- activities: BEGIN before the work, END (STOP if cancelled) after it ------------------


async def _async_work(run: str, lbl: str, work_s: float) -> None:
    n = ledger().begin(run, lbl)
    try:
        await asyncio.sleep(work_s)
    except asyncio.CancelledError:  # a race branch that lost
        ledger().stop(run, lbl, n)
        raise
    ledger().end(run, lbl, n)


def _sync_work(run: str, lbl: str, work_s: float) -> None:
    n = ledger().begin(run, lbl)
    time.sleep(work_s)  # in the engine's activity threads; a lost race cannot stop it
    ledger().end(run, lbl, n)


@activity(retry=ONCE)
async def twist(run: str, lbl: str, x: int, work_s: float) -> int:
    await _async_work(run, lbl, work_s)
    return kit.twist_value(x)


@activity(retry=ONCE)
def crunch(run: str, lbl: str, x: int, work_s: float) -> int:
    _sync_work(run, lbl, work_s)
    return kit.crunch_value(x)


@activity(retry=ONCE)
async def book_async(
    run: str, lbl: str, x: int, work_s: float, undo_lbl: str, undo_s: float
) -> dict[str, Any]:
    await _async_work(run, lbl, work_s)
    return {"run": run, "label": undo_lbl, "work": undo_s, "value": kit.twist_value(x)}


@activity(retry=ONCE)
def book_sync(
    run: str, lbl: str, x: int, work_s: float, undo_lbl: str, undo_s: float
) -> dict[str, Any]:
    _sync_work(run, lbl, work_s)
    return {"run": run, "label": undo_lbl, "work": undo_s, "value": kit.crunch_value(x)}


@activity(retry=ONCE)
async def undo_async(booking: dict[str, Any]) -> str:
    await _async_work(booking["run"], booking["label"], booking["work"])
    return f"undone {booking['value']}"


@activity(retry=ONCE)
def undo_sync(booking: dict[str, Any]) -> str:
    _sync_work(booking["run"], booking["label"], booking["work"])
    return f"undone {booking['value']}"


@activity(retry=ONCE)
async def boom(run: str, lbl: str) -> None:
    n = ledger().begin(run, lbl)
    await asyncio.sleep(0.01)
    ledger().fail(run, lbl, n)
    raise RuntimeError(kc.boom_message(run))


ACT: dict[str, Callable[..., Any]] = {"async": twist, "sync": crunch}
BOOK: dict[str, Callable[..., Any]] = {"async": book_async, "sync": book_sync}
UNDO: dict[str, Callable[..., Any]] = {"async": undo_async, "sync": undo_sync}


# --- workflows: MARK after each phase returned (so after it committed) --------------------


@workflow
async def fan(ctx: WorkflowContext, run_id: str, seed: int) -> int:
    x = kit.origin(run_id)
    for p, phase in enumerate(kc.fan_plan(run_id, seed), start=1):
        calls = [
            ctx.run(ACT[b.kind], run_id, kc.branch_label(p, i), (x + i) % kc.MOD, b.work_s)
            for i, b in enumerate(phase.branches)
        ]
        if phase.keyed:
            keyed = await ctx.all_keyed({kc.branch_label(p, i): c for i, c in enumerate(calls)})
            values = [keyed[kc.branch_label(p, i)] for i in range(len(calls))]
        else:
            values = await ctx.all(*calls)
        x = kc.fold(values)
        ledger().mark(run_id, p)
    return x


@workflow
async def racer(ctx: WorkflowContext, run_id: str, seed: int) -> list[list[Any]]:
    plan = kc.race_plan(run_id, seed)
    await ctx.wait_for_signal("ready")  # sent after both "go": the next scan sees them
    out: list[list[Any]] = [["first", await ctx.wait_for_signal("go")]]
    # "go" #2 is now in the run's signal cache, so (on the live path) both branches
    # settle in the same loop turn: the losing wait has taken the signal when the race
    # picks the nap, and must give it back.
    key, value = await ctx.race_keyed({"nap": ctx.sleep(0), "signal": ctx.wait_for_signal("go")})
    if key == "nap":
        value = await ctx.wait_for_signal("go", timeout=kc.FOLLOW_UP_TIMEOUT_S)
    out.append([key, value])
    key, value = await ctx.race_keyed(
        {"signal": ctx.wait_for_signal("late"), "nap": ctx.sleep(plan.signal_nap_s)}
    )
    if key == "nap":  # the losing wait must have left the signal for this one
        value = await ctx.wait_for_signal("late", timeout=kc.FOLLOW_UP_TIMEOUT_S)
    out.append([key, value])
    ledger().mark(run_id, 1)
    x = kit.origin(run_id)
    for p, phase in enumerate(plan.phases, start=2):
        act = ctx.run(ACT[phase.kind], run_id, kc.label(p), x, phase.work_s)
        if phase.keyed:
            key, value = await ctx.race_keyed({"act": act, "nap": ctx.sleep(phase.nap_s)})
        else:
            value = await ctx.race(act, ctx.sleep(phase.nap_s))
            key = "nap" if value is None else "act"
        x = value if key == "act" else (x + 1) % kc.MOD
        out.append([key, value])
        ledger().mark(run_id, p)
    return out


@workflow
async def kid(ctx: WorkflowContext, seed: int, x: int) -> int:
    me = kc.ledger_name(ctx.workflow_id)
    for j, b in enumerate(kc.kid_plan(ctx.workflow_id, seed), start=1):
        x = await ctx.run(ACT[b.kind], me, kc.label(j), x, b.work_s)
        ledger().mark(me, j)
    return x


@workflow
async def parent(ctx: WorkflowContext, run_id: str, seed: int) -> int:
    x = kit.origin(run_id)
    for p, phase in enumerate(kc.parent_plan(run_id, seed), start=1):
        if phase.kind == "act":
            x = await ctx.run(ACT[phase.branch.kind], run_id, kc.label(p), x, phase.branch.work_s)
        elif phase.kind == "child":
            x = await ctx.start_child(kid, seed, x, parent_close_policy="await")
        else:
            x = kc.fold(
                await ctx.all(
                    *(
                        ctx.start_child(kid, seed, (x + i) % kc.MOD, parent_close_policy="await")
                        for i in range(phase.width)
                    )
                )
            )
        ledger().mark(run_id, p)
    return x


@workflow
async def trip(ctx: WorkflowContext, run_id: str, seed: int) -> list[str]:
    plan = kc.trip_plan(run_id, seed)
    await ctx.sleep(plan.prelude_s)  # spreads the runs' sagas over time
    ledger().mark(run_id, 1)
    x = kit.origin(run_id)
    try:
        async with ctx.saga() as saga:
            for i, p in enumerate(kc.BOOKING_PHASES):
                book, undo = BOOK[plan.bookings[i].kind], UNDO[plan.undos[i].kind]
                args = (run_id, kc.label(p), x, plan.bookings[i].work_s)
                extra = (kc.label(kc.undo_phase(p)), plan.undos[i].work_s)
                if p == 3:  # the explicit form
                    booking = await saga.run(book, *args, *extra)
                    saga.add_compensation(undo, booking)
                else:
                    booking = await saga.run(book, *args, *extra, compensate=undo)
                x = booking["value"]
                ledger().mark(run_id, p)
            await ctx.run(boom, run_id, kc.label(kc.BOOM_PHASE))
    except ActivityError as err:
        if not plan.catch:
            raise
        ledger().mark(run_id, kc.ROLLED_BACK_PHASE)
        return ["rolled back", err.error_message]
    return ["booked", str(x)]


WORKFLOWS: dict[str, Callable[..., Any]] = {
    "all": fan,
    "race": racer,
    "children": parent,
    "saga": trip,
}


# --- the driver ---------------------------------------------------------------------------


async def send_signals(engine: Engine, run_id: str, seed: int) -> None:
    """Signal ``go`` twice and ``ready`` at once, ``late`` when the plan says, each once
    across lifetimes (its signal id makes a later lifetime's resend a no-op)."""
    after = kc.race_plan(run_id, seed).send_after_s
    try:
        for n in (1, 2):
            await engine.signal(run_id, "go", kc.go_payload(run_id, n), signal_id=f"go-{n}")
        await engine.signal(run_id, "ready", kc.ready_payload(run_id), signal_id="ready")
        if after is None:  # wait until the "late" race (the run's second) is decided
            while sum(s.kind == "race" for s in await engine.history(run_id)) < 2:
                if (await engine.describe(run_id)).is_terminal:
                    return  # it failed before: the worker reports it
                await asyncio.sleep(0.02)  # the journal is in the store: nothing to wait on
        else:
            due = (await engine.describe(run_id)).created_at.timestamp() + after
            await asyncio.sleep(max(0.0, due - time.time()))
        await engine.signal(run_id, "late", kc.late_payload(run_id), signal_id="late")
    except WorkflowTerminalError:
        pass  # it finished, so it consumed what earlier lifetimes sent


def expected_outcome(mode: str, run_id: str, seed: int) -> Any:
    if mode == "all":
        return ("completed", kc.fan_journal(run_id, seed)[1])
    if mode == "children":
        return ("completed", kc.children_journals(run_id, seed)[1])
    if kc.trip_plan(run_id, seed).catch:
        return ("completed", ["rolled back", kc.boom_message(run_id)])
    return ("failed", "ActivityError", kc.boom_message(run_id))


async def outcome(engine: Engine, run_id: str) -> Any:
    try:
        return ("completed", await engine.get_handle(run_id).result())
    except WorkflowFailedError as err:
        message = err.error_message
        return ("failed", err.error_type, message[message.rfind(": run-") + 2 :])


async def main(db: str, ledger_path: str, n_runs: int, seed: int, mode: str) -> int:
    global _ledger
    lifetime = os.environ.get("CRASHKIT_LIFETIME") or f"{os.getpid()}-{time.time_ns()}"
    _ledger = kc.CompositionLedger(ledger_path, lifetime)
    _ledger.start()
    wf = WORKFLOWS[mode]
    ids = [f"run-{i}" for i in range(n_runs)]
    async with Engine(f"sqlite:///{db}", workflows=[fan, racer, kid, parent, trip]) as engine:
        for run_id in ids:
            await engine.start(wf, run_id, seed, id=run_id, on_conflict="use_existing")
        senders = [send_signals(engine, i, seed) for i in ids] if mode == "race" else []
        got = await asyncio.gather(*(outcome(engine, i) for i in ids), *senders)
    problems = []
    for run_id, result in zip(ids, got, strict=False):
        if mode == "race":
            if result[0] != "completed":
                problems.append(f"{run_id}: {result!r}")
            else:
                problems += kc.race_result_problems(run_id, seed, result[1])
        elif result != (want := expected_outcome(mode, run_id, seed)):
            problems.append(f"{run_id}: {result!r}, expected {want!r}")
    if problems:
        print("wrong outcomes:\n" + "\n".join(problems), file=sys.stderr)
        return 1
    _ledger.done()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    db_path, ledger_file, runs, seed_arg, run_mode = sys.argv[1:6]
    sys.exit(asyncio.run(main(db_path, ledger_file, int(runs), int(seed_arg), run_mode)))
