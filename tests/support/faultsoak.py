"""Workflows, right answers and the ledger checker of the storage-fault soak (``tests/soak``).

Every run is a pure function of its id and the soak seed, so the test knows
each run's result and the activity calls its journal must hold without
running anything. Six kinds of run, each written the way users write them:

``steps``    async ``def`` / sync ``def`` / retried (flaky) activities, real short
             sleeps, ``ctx.all`` pairs, an activity racing a long sleep, a memo;
``messages`` signals, updates applied by a handler (``wait_until`` their count), a
             human review, then ``wait_for_update("close")`` answered by the run;
``family``   two children under ``ctx.all`` and a third awaited alone, then an activity;
``saga``     two bookings, a step that always fails, compensations newest first;
``relay``    one activity per generation over ``continue_as_new``;
``guarded``  ``try: ctx.run(pay) except Exception: ctx.run(refund)`` around each
             step: ``pay`` never fails, so a refund only runs if an engine failure
             reached workflow code as an ordinary exception.

Activities write ``BEGIN``/``END``/``FAIL``/``STOP`` lines to a
:class:`support.crashkit.Ledger` (token ``RUN/LABEL``, execution number ``N``)
and return ``[token, value, N]``, so the journal says *which* execution's
outcome it committed. The checker compares the two: an execution that began
after the committed one is a completed step that ran again.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyweft import ActivityError, RetryPolicy, WorkflowContext, activity, workflow
from support import crashkit as kit

KINDS = ("steps", "messages", "family", "saga", "relay", "guarded")
GENERATIONS = 3  # relay: continue_as_new until this generation
N_SIGNALS, N_UPDATES = 3, 3
LONG_S = 3600.0  # a race's losing sleep: never the winner
FAST = RetryPolicy(max_attempts=6, initial_interval=0.01, backoff=2.0, max_interval=0.05)
DOOMED = RetryPolicy(max_attempts=2, initial_interval=0.01)
SUMMARY: list[str] = []
"""Lines the soak's conftest prints in pytest's terminal summary (CI reads them)."""


class SoakLedger(kit.Ledger):
    """The crash tests' ledger, in one process: nothing is killed, so no fsync."""

    def _write(
        self, kind: str, run: str = "-", lbl: str = "-", n: int = 0, sync: bool = True
    ) -> None:
        super()._write(kind, run, lbl, n, sync=False)

    def stop(self, run: str, lbl: str, n: int) -> None:
        with self._lock:
            self._write("STOP", run, lbl, n)


_ledger: SoakLedger | None = None


def use_ledger(ledger: SoakLedger | None) -> None:
    global _ledger
    _ledger = ledger


def ledger() -> SoakLedger:
    assert _ledger is not None, "the soak sets the ledger before opening an engine"
    return _ledger


def token(run: str, lbl: str) -> str:
    return f"{run}/{lbl}"


def split(tok: str) -> tuple[str, str]:
    run, lbl = tok.rsplit("/", 1)
    return run, lbl


# --- activities -------------------------------------------------------------------------


async def _async_work(tok: str, work_s: float) -> int:
    run, lbl = split(tok)
    n = ledger().begin(run, lbl)
    try:
        await asyncio.sleep(work_s)
    except asyncio.CancelledError:  # torn down, or a race loser
        ledger().stop(run, lbl, n)
        raise
    ledger().end(run, lbl, n)
    return n


@activity(name="soak_twist")
async def twist(tok: str, x: int, work_s: float) -> list[Any]:
    n = await _async_work(tok, work_s)
    return [tok, kit.twist_value(x), n]


@activity(name="soak_crunch")
def crunch(tok: str, x: int, work_s: float) -> list[Any]:
    run, lbl = split(tok)
    n = ledger().begin(run, lbl)
    time.sleep(work_s)
    ledger().end(run, lbl, n)
    return [tok, kit.crunch_value(x), n]


@activity(name="soak_flaky", retry=FAST)
async def flaky(tok: str, x: int) -> list[Any]:
    run, lbl = split(tok)
    n = ledger().begin(run, lbl)
    if n == 1:
        ledger().fail(run, lbl, n)
        raise RuntimeError(f"{tok}: the first attempt always fails")
    ledger().end(run, lbl, n)
    return [tok, kit.flaky_value(x), n]


@activity(name="soak_doomed", retry=DOOMED)
async def doomed(tok: str) -> None:
    run, lbl = split(tok)
    n = ledger().begin(run, lbl)
    ledger().fail(run, lbl, n)
    raise RuntimeError("sold out")


@activity(name="soak_undo")
async def undo(booking: list[Any]) -> list[Any]:
    tok = f"{booking[0]}u"
    n = await _async_work(tok, 0.001)
    return [tok, kit.twist_value(booking[1]), n]


@activity(name="soak_pay")
async def pay(tok: str, x: int) -> list[Any]:
    n = await _async_work(tok, 0.002)
    return [tok, kit.twist_value(x), n]


@activity(name="soak_refund")
async def refund(tok: str) -> list[Any]:
    n = await _async_work(tok, 0.001)
    return [tok, 0, n]


ACTIVITIES = [twist, crunch, flaky, doomed, undo, pay, refund]


# --- plans and right answers ------------------------------------------------------------


def _rng(seed: int, run: str) -> random.Random:
    return random.Random(f"soak/{seed}/{run}")  # str seeds hash with sha512: stable


def steps_plan(run: str, seed: int) -> list[tuple[str, float]]:
    rng = _rng(seed, run)
    kinds = ("async", "sync", "flaky", "sleep", "pair", "race", "memo")
    picks = rng.choices(kinds, weights=(4, 4, 2, 2, 2, 1, 1), k=rng.randint(4, 10))
    return [(k, rng.choice((0.0, 0.001, 0.005, 0.02))) for k in picks]


def expected(run: str, seed: int) -> tuple[Any, list[str], list[str]]:
    """``(result, tokens the journal must hold, child run ids)`` of a top-level run."""
    kind = run.split("-", 1)[0]
    x = kit.origin(run)
    tokens: list[str] = []
    if kind == "steps":
        for p, (step, _) in enumerate(steps_plan(run, seed), start=1):
            lbl = f"{p:03d}"
            if step in ("async", "race"):
                x = kit.twist_value(x)
                tokens.append(token(run, lbl))
            elif step == "sync":
                x = kit.crunch_value(x)
                tokens.append(token(run, lbl))
            elif step == "flaky":
                x = kit.flaky_value(x)
                tokens.append(token(run, lbl))
            elif step == "pair":
                x = kit.combine(kit.twist_value(x), kit.crunch_value(x))
                tokens += [token(run, lbl + "L"), token(run, lbl + "R")]
            elif step == "memo":
                x = (x + 1) % kit.MOD
        return x, tokens, []
    if kind == "messages":
        result = {
            "signals": list(range(N_SIGNALS)),
            "updates": [f"{run}-u{i}" for i in range(N_UPDATES)],
            "review": "approved",
        }
        return result, [], []
    if kind == "family":
        kids = [f"{run}.c{i}" for i in (1, 2, 3)]
        values = []
        for kid in kids:
            values.append(child_value(kid))
            tokens += [token(kid, "a"), token(kid, "s")]
        total = 0
        for v in values:
            total = kit.combine(total, v)
        tokens.append(token(run, "fin"))
        return kit.twist_value(total), tokens, kids
    if kind == "saga":
        tokens = [token(run, lbl) for lbl in ("b1", "b2", "b2u", "b1u")]
        return "rolled back: sold out", tokens, []
    if kind == "relay":
        for g in range(GENERATIONS + 1):
            x = kit.twist_value(x)
            tokens.append(token(run, f"g{g}"))
        return x, tokens, []
    if kind == "guarded":
        for i in range(3):
            x = kit.twist_value(x)
            tokens.append(token(run, f"pay{i}"))
        return x, tokens, []
    raise AssertionError(f"unknown run kind in {run!r}")


def child_value(kid: str) -> int:
    return kit.crunch_value(kit.twist_value(kit.origin(kid)))


def runs_for(n_per_kind: int) -> list[str]:
    return [f"{kind}-{i:04d}" for i in range(n_per_kind) for kind in KINDS]


# --- workflows --------------------------------------------------------------------------


@workflow(name="soak_steps")
async def soak_steps(ctx: WorkflowContext, run: str, seed: int) -> int:
    x = kit.origin(run)
    for p, (step, work) in enumerate(steps_plan(run, seed), start=1):
        tok = token(run, f"{p:03d}")
        if step == "async":
            x = (await ctx.run(twist, tok, x, work, retry=FAST))[1]
        elif step == "sync":
            x = (await ctx.run(crunch, tok, x, work, retry=FAST))[1]
        elif step == "flaky":
            x = (await ctx.run(flaky, tok, x))[1]
        elif step == "sleep":
            await ctx.sleep(work + 0.005)
        elif step == "pair":
            left, right = await ctx.all(
                ctx.run(twist, tok + "L", x, work, retry=FAST),
                ctx.run(crunch, tok + "R", x, work, retry=FAST),
            )
            x = kit.combine(left[1], right[1])
        elif step == "race":
            won = await ctx.race(ctx.run(twist, tok, x, work, retry=FAST), ctx.sleep(LONG_S))
            x = won[1]
        elif step == "memo":
            x = await ctx.memo(f"m{p}", lambda x=x: (x + 1) % kit.MOD)
    return x


@workflow(name="soak_messages")
async def soak_messages(ctx: WorkflowContext, run: str) -> dict[str, Any]:
    applied: list[str] = []

    @ctx.on_update("add")
    def add(item: dict[str, Any]) -> int:
        applied.append(item["key"])
        return len(applied)

    signals = [await ctx.wait_for_signal("item") for _ in range(N_SIGNALS)]
    await ctx.wait_until(lambda: len(applied) >= N_UPDATES)
    decision = await ctx.review({"run": run}, review_type="soak")
    close = await ctx.wait_for_update("close")
    await close.respond(f"closed {run}")
    return {"signals": signals, "updates": applied, "review": decision.decision}


@workflow(name="soak_child")
async def soak_child(ctx: WorkflowContext, kid: str) -> int:
    x = (await ctx.run(twist, token(kid, "a"), kit.origin(kid), 0.001, retry=FAST))[1]
    return int((await ctx.run(crunch, token(kid, "s"), x, 0.001, retry=FAST))[1])


@workflow(name="soak_family")
async def soak_family(ctx: WorkflowContext, run: str) -> int:
    first, second = await ctx.all(
        ctx.start_child(soak_child, f"{run}.c1", id=f"{run}.c1"),
        ctx.start_child(soak_child, f"{run}.c2", id=f"{run}.c2"),
    )
    third = await ctx.start_child(soak_child, f"{run}.c3", id=f"{run}.c3")
    total = 0
    for v in (first, second, third):
        total = kit.combine(total, v)
    return int((await ctx.run(twist, token(run, "fin"), total, 0.001, retry=FAST))[1])


@workflow(name="soak_saga")
async def soak_saga(ctx: WorkflowContext, run: str) -> str:
    x = kit.origin(run)
    try:
        async with ctx.saga() as saga:
            await saga.run(twist, token(run, "b1"), x, 0.001, compensate=undo, retry=FAST)
            await saga.run(crunch, token(run, "b2"), x, 0.001, compensate=undo, retry=FAST)
            await saga.run(doomed, token(run, "b3"))
    except ActivityError as err:
        return f"rolled back: {err.error_message}"
    return "booked"


@workflow(name="soak_relay")
async def soak_relay(ctx: WorkflowContext, run: str, gen: int, x: int, carried: list[Any]) -> Any:
    done = await ctx.run(twist, token(run, f"g{gen}"), x, 0.001, retry=FAST)
    carried = [*carried, done]
    if gen < GENERATIONS:
        await ctx.continue_as_new(run, gen + 1, done[1], carried)
    return {"value": done[1], "carried": carried}


@workflow(name="soak_guarded")
async def soak_guarded(ctx: WorkflowContext, run: str) -> Any:
    # Written the way users write it: any exception from a step means "undo".
    x = kit.origin(run)
    for i in range(3):
        try:
            x = (await ctx.run(pay, token(run, f"pay{i}"), x, retry=FAST))[1]
        except Exception:
            await ctx.run(refund, token(run, f"refund{i}"), retry=FAST)
            return "refunded"
        try:
            await ctx.sleep(0.005)
        except Exception:
            await ctx.run(refund, token(run, f"refund-sleep{i}"), retry=FAST)
            return "refunded"
    return x


WORKFLOWS = [
    soak_steps,
    soak_messages,
    soak_child,
    soak_family,
    soak_saga,
    soak_relay,
    soak_guarded,
]


def start_args(run: str, seed: int) -> tuple[Any, tuple[Any, ...]]:
    kind = run.split("-", 1)[0]
    if kind == "steps":
        return soak_steps, (run, seed)
    if kind == "relay":
        return soak_relay, (run, 0, kit.origin(run), [])
    wf = {
        "messages": soak_messages,
        "family": soak_family,
        "saga": soak_saga,
        "guarded": soak_guarded,
    }[kind]
    return wf, (run,)


def comparable_result(run: str, result: Any) -> Any:
    """The part of a result the plan predicts (a relay also carries its journal)."""
    if run.startswith("relay-") and isinstance(result, dict):
        return result.get("value")
    return result


# --- the checker ------------------------------------------------------------------------


def recorded_executions(value: Any) -> Iterator[tuple[str, int]]:
    """Every ``[token, value, n]`` an activity returned, found anywhere in ``value``."""
    if isinstance(value, list | tuple):
        if (
            len(value) == 3
            and isinstance(value[0], str)
            and "/" in value[0]
            and isinstance(value[2], int)
        ):
            yield value[0], value[2]
            return
        for item in value:
            yield from recorded_executions(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from recorded_executions(item)


@dataclass(slots=True)
class Execution:
    begin: kit.Event
    outcome: kit.Event | None = None


@dataclass(slots=True)
class SoakStats:
    executions: int = 0
    retries: int = 0  # failed attempts of flaky/doomed activities, by design
    reruns_uncommitted: int = 0  # finished, its commit did not land, so ran again: allowed
    interrupted: int = 0  # no END/FAIL: torn down (STOP) or still running at the end
    problems: list[str] = field(default_factory=list)


def check_ledger(
    events: list[kit.Event], committed: dict[str, int], must_hold: set[str]
) -> SoakStats:
    """Violations of "a completed step never runs again" in one process with no kills.

    ``committed`` maps a token to the execution number whose outcome the journal
    holds; ``must_hold`` is every token the plans say the journals must hold.
    """
    stats = SoakStats()
    problems = stats.problems
    runs: dict[str, list[Execution]] = defaultdict(list)
    open_: dict[tuple[str, int], Execution] = {}
    for e in events:
        if e.kind == "BEGIN":
            started = Execution(e)
            runs[e.token].append(started)
            open_[(e.token, e.n)] = started
        elif e.kind in ("END", "FAIL", "STOP"):
            ended = open_.pop((e.token, e.n), None)
            if ended is None:
                problems.append(f"line {e.index}: {e.kind} without BEGIN for {e.token} #{e.n}")
            else:
                ended.outcome = e
    for tok in sorted(must_hold - set(committed)):
        problems.append(f"{tok}: the finished run's journal does not hold this step")
    for tok, execs in sorted(runs.items()):
        stats.executions += len(execs)
        lbl = split(tok)[1]
        r = committed.get(tok)
        if tok not in must_hold:
            what = "refund" if lbl.startswith("refund") else "step"
            if lbl != "b3":  # the saga's doomed step fails on purpose and is not returned
                problems.append(
                    f"{tok}: a {what} the plan never takes ran {len(execs)} time(s): an "
                    "engine failure reached workflow code as an ordinary exception"
                    if what == "refund"
                    else f"{tok}: ran {len(execs)} time(s) but no plan has this step"
                )
        for i, x in enumerate(execs):
            where = f"{tok} #{x.begin.n} (ledger line {x.begin.index})"
            if r is not None and x.begin.n > r:
                problems.append(
                    f"{where} began after #{r}, whose outcome the journal holds: a completed "
                    "step ran again"
                )
            if i + 1 < len(execs):
                nxt = execs[i + 1].begin
                if x.outcome is None or x.outcome.index > nxt.index:
                    problems.append(
                        f"{where} was still running when #{nxt.n} began (line {nxt.index}): "
                        "one step driven twice at once"
                    )
            if x.outcome is None or x.outcome.kind == "STOP":
                stats.interrupted += 1
            elif x.outcome.kind == "FAIL":
                if not (lbl == "b3" or (x.begin.n == 1 and r is not None)):
                    problems.append(f"{where} failed, but only a flaky first attempt may fail")
                stats.retries += 1
            elif r is not None and x.begin.n < r:
                stats.reruns_uncommitted += 1
    return stats


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else default
