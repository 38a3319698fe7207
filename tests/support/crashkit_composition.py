"""Plans, answers and checks for the composition SIGKILL tests.

Used by ``tests/crash/composition_worker.py`` (the worker process) and
``tests/crash/test_sigkill_composition.py`` (the test). Builds on
:mod:`support.crashkit`: the same append-only ledger (one ``os.write`` per
line on an ``O_APPEND`` descriptor, fsynced), the same
``KIND LIFETIME RUN LABEL N TIME`` lines, the same worker start/kill helpers.

Four workloads (``MODE``), each a pure function of ``(run_id, seed)``:

``all``       phases of ``ctx.all`` / ``ctx.all_keyed`` over 2-5 async and sync
              activities; label ``PPPX`` (phase ``PPP``, branch letter ``X``).
``race``      phase 1: ``wait_for_signal("ready")`` (sent after ``go`` twice) and
              ``wait_for_signal("go")``; then ``sleep(0)`` races a second
              ``wait_for_signal("go")`` (both settle at once); then
              ``wait_for_signal("late")`` races a sleep. A lost signal wait is
              followed by a plain wait for the same name. Phases 2.. race an
              activity (label ``PPP``) against a sleep.
``children``  a parent's phases are an activity, one awaited child, or
              ``ctx.all`` over 2-3 awaited children; a child ``P/S`` (parent id,
              parent step) runs 2-3 activities and writes its ledger lines as
              run ``P~S``.
``saga``      a durable prelude sleep, three bookings (phases 2-4), a step that
              always fails (phase 5), then the compensations of bookings 4, 3, 2
              as phases 6, 7, 8.

Extra ledger kind: ``STOP`` -- an async activity saw its cancellation (a race
loser). A ``MARK run p`` line (written by the workflow after phase ``p``
returned, so after the engine committed it) proves every step of phase
``<= p`` of that run committed.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support import crashkit as kit

WORKER = Path(__file__).resolve().parents[1] / "crash" / "composition_worker.py"
MOD = kit.MOD
KINDS = ("async", "sync")
ACT_NAMES = {"async": "twist", "sync": "crunch"}
BOOK_NAMES = {"async": "book_async", "sync": "book_sync"}
UNDO_NAMES = {"async": "undo_async", "sync": "undo_sync"}
FOLLOW_UP_TIMEOUT_S = 20.0  # a losing signal wait left the signal: the next wait gets it


class CompositionLedger(kit.Ledger):
    def stop(self, run: str, lbl: str, n: int) -> None:
        with self._lock:
            self._write("STOP", run, lbl, n)


def label(phase: int, branch: str = "") -> str:
    return kit.label(phase, branch)


def act_value(kind: str, x: int) -> int:
    return kit.twist_value(x) if kind == "async" else kit.crunch_value(x)


def fold(values: Sequence[int]) -> int:
    acc = 0
    for v in values:
        acc = kit.combine(acc, v)
    return acc


def _rng(seed: int, mode: str, key: str) -> random.Random:
    return random.Random(f"{seed}/{mode}/{key}")  # str seeds hash with sha512: stable


def _index(run_id: str) -> int:
    return int(run_id.rsplit("-", 1)[1])


@dataclass(frozen=True, slots=True)
class Branch:
    kind: str  # "async" | "sync"
    work_s: float


def _branch(rng: random.Random) -> Branch:
    return Branch(rng.choice(KINDS), rng.choice(kit.WORK_CHOICES))


# --- all ------------------------------------------------------------------------------

FAN_LONG = 50  # run-0's phases: the workload outlasts every planned kill


@dataclass(frozen=True, slots=True)
class FanPhase:
    keyed: bool
    branches: tuple[Branch, ...]


def fan_plan(run_id: str, seed: int) -> list[FanPhase]:
    rng = _rng(seed, "all", run_id)
    n = FAN_LONG if run_id == "run-0" else rng.randint(10, 70)
    return [
        FanPhase(rng.random() < 0.35, tuple(_branch(rng) for _ in range(rng.randint(2, 5))))
        for _ in range(n)
    ]


def branch_label(phase: int, i: int) -> str:
    return label(phase, chr(ord("A") + i))


# --- race -----------------------------------------------------------------------------

RACE_LONG = 90


@dataclass(frozen=True, slots=True)
class RacePhase:
    kind: str
    work_s: float
    nap_s: float
    keyed: bool  # ctx.race_keyed, else ctx.race


@dataclass(frozen=True, slots=True)
class RacePlan:
    signal_nap_s: float
    # The worker signals "late" this long after the run was created; None: once the
    # "late" race is in the journal (so the nap won it).
    send_after_s: float | None
    phases: tuple[RacePhase, ...]  # phases 2, 3, ...


def race_plan(run_id: str, seed: int) -> RacePlan:
    rng = _rng(seed, "race", run_id)
    style = _index(run_id) % 3
    send: float | None
    if style == 0:  # the signal is there long before the nap ends
        nap, send = 2.0, 0.0
    elif style == 1:  # the signal is sent only once the nap won
        nap, send = rng.uniform(0.02, 0.1), None
    else:  # a close call
        nap, send = rng.uniform(0.05, 0.3), rng.uniform(0.05, 0.3)
    n = RACE_LONG if run_id == "run-0" else rng.randint(10, 45)
    phases = tuple(
        RacePhase(
            rng.choice(KINDS),
            rng.uniform(0.005, 0.05),
            rng.uniform(0.005, 0.05),
            rng.random() < 0.5,
        )
        for _ in range(n)
    )
    return RacePlan(nap, send, phases)


def go_payload(run_id: str, n: int) -> str:
    return f"go{n}-{run_id}"


def ready_payload(run_id: str) -> str:
    return f"ready-{run_id}"


def late_payload(run_id: str) -> str:
    return f"late-{run_id}"


# --- children -------------------------------------------------------------------------

PARENT_LONG = 70


@dataclass(frozen=True, slots=True)
class ParentPhase:
    kind: str  # "act" | "child" | "fan"
    branch: Branch  # the activity of an "act" phase
    width: int  # children of a "fan" phase


def parent_plan(run_id: str, seed: int) -> list[ParentPhase]:
    rng = _rng(seed, "children", run_id)
    n = PARENT_LONG if run_id == "run-0" else rng.randint(4, 14)
    return [
        ParentPhase(rng.choice(("act", "child", "fan")), _branch(rng), rng.randint(2, 3))
        for _ in range(n)
    ]


def kid_plan(child_id: str, seed: int) -> list[Branch]:
    rng = _rng(seed, "kid", child_id)
    return [_branch(rng) for _ in range(rng.randint(2, 3))]


def kid_result(child_id: str, seed: int, x: int) -> int:
    for b in kid_plan(child_id, seed):
        x = act_value(b.kind, x)
    return x


def ledger_name(workflow_id: str) -> str:
    """A child's id ``P/S`` as a ledger run field (tokens split on ``/``)."""
    return workflow_id.replace("/", "~")


# --- saga -----------------------------------------------------------------------------

BOOKING_PHASES = (2, 3, 4)
BOOM_PHASE = 5
ROLLED_BACK_PHASE = 8  # the MARK written after a caught failure: every compensation committed


@dataclass(frozen=True, slots=True)
class TripPlan:
    prelude_s: float
    bookings: tuple[Branch, ...]  # phases 2, 3, 4
    undos: tuple[Branch, ...]  # undos[i] compensates bookings[i]
    catch: bool  # return the rolled-back marker, or let the run fail


def trip_plan(run_id: str, seed: int) -> TripPlan:
    rng = _rng(seed, "saga", run_id)
    bookings = tuple(_branch(rng) for _ in BOOKING_PHASES)
    undos = tuple(Branch(rng.choice(KINDS), rng.uniform(0.05, 0.1)) for _ in BOOKING_PHASES)
    return TripPlan(rng.uniform(0.05, 4.0), bookings, undos, _index(run_id) % 2 == 0)


def undo_phase(booking_phase: int) -> int:
    return 10 - booking_phase  # 4 -> 6, 3 -> 7, 2 -> 8: newest booking compensated first


def boom_message(run_id: str) -> str:
    return f"{run_id}: no seats left"


def booking_value(run_id: str, seed: int, phase: int, x: int) -> dict[str, Any]:
    plan = trip_plan(run_id, seed)
    i = BOOKING_PHASES.index(phase)
    return {
        "run": run_id,
        "label": label(undo_phase(phase)),
        "work": plan.undos[i].work_s,
        "value": act_value(plan.bookings[i].kind, x),
    }


# --- the right journals ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Expected:
    """One journal step: what it records, and the activity call (token) behind it."""

    step: int
    kind: str
    name: str
    status: str
    result: Any
    token: str | None = None
    expect: str = "END"  # the outcome of the token's committed execution: END | FAIL


@dataclass(frozen=True, slots=True)
class Call:
    """An activity call of the plan: ``expect`` is END, FAIL or RACE (it may lose)."""

    token: str
    workflow_id: str
    step: int
    expect: str


def fan_journal(run_id: str, seed: int) -> tuple[list[Expected], int]:
    x, step, out = kit.origin(run_id), 0, []
    for p, phase in enumerate(fan_plan(run_id, seed), start=1):
        values = []
        for i, b in enumerate(phase.branches):
            step += 1
            v = act_value(b.kind, (x + i) % MOD)
            values.append(v)
            out.append(
                Expected(
                    step, "activity", ACT_NAMES[b.kind], "completed", v,
                    f"{run_id}/{branch_label(p, i)}",
                )
            )  # fmt: skip
        x = fold(values)
    return out, x


def children_journals(run_id: str, seed: int) -> tuple[dict[str, list[Expected]], int]:
    """Every run's journal (the parent's and each child's, by id) and the parent's result."""
    x, step = kit.origin(run_id), 0
    parent: list[Expected] = []
    runs = {run_id: parent}

    def child(x_in: int) -> int:
        nonlocal step
        step += 1
        cid = f"{run_id}/{step}"
        kid, y = [], x_in
        for j, b in enumerate(kid_plan(cid, seed), start=1):
            y = act_value(b.kind, y)
            kid.append(
                Expected(
                    j, "activity", ACT_NAMES[b.kind], "completed", y,
                    f"{ledger_name(cid)}/{label(j)}",
                )
            )  # fmt: skip
        runs[cid] = kid
        parent.append(Expected(step, "child", "kid", "completed", y))
        return y

    for p, phase in enumerate(parent_plan(run_id, seed), start=1):
        if phase.kind == "act":
            step += 1
            x = act_value(phase.branch.kind, x)
            parent.append(
                Expected(
                    step, "activity", ACT_NAMES[phase.branch.kind], "completed", x,
                    f"{run_id}/{label(p)}",
                )
            )  # fmt: skip
        elif phase.kind == "child":
            x = child(x)
        else:
            x = fold([child((x + i) % MOD) for i in range(phase.width)])
    return runs, x


def trip_journal(run_id: str, seed: int) -> list[Expected]:
    plan = trip_plan(run_id, seed)
    out = [Expected(1, "sleep", "sleep", "completed", None)]
    x, bookings = kit.origin(run_id), []
    for i, p in enumerate(BOOKING_PHASES):
        booked = booking_value(run_id, seed, p, x)
        x = booked["value"]
        bookings.append(booked)
        kind = plan.bookings[i].kind
        out.append(
            Expected(p, "activity", BOOK_NAMES[kind], "completed", booked, f"{run_id}/{label(p)}")
        )
    out.append(
        Expected(5, "activity", "boom", "failed", None, f"{run_id}/{label(5)}", expect="FAIL")
    )
    for i in reversed(range(len(BOOKING_PHASES))):
        p = undo_phase(BOOKING_PHASES[i])
        out.append(
            Expected(
                p, "activity", UNDO_NAMES[plan.undos[i].kind], "completed",
                f"undone {bookings[i]['value']}", f"{run_id}/{label(p)}",
            )
        )  # fmt: skip
    return out


def race_journal(
    run_id: str, seed: int, winners: dict[int, int]
) -> tuple[list[Expected], list[Call], list[list[Any]]]:
    """The journal, activity calls and result a race run must have, given its recorded
    winners (``winners[race step] = index``; a missing race leaves the rest undecided)."""
    plan = race_plan(run_id, seed)
    go1, go2, late = go_payload(run_id, 1), go_payload(run_id, 2), late_payload(run_id)
    journal = [Expected(1, "signal", "ready", "completed", ready_payload(run_id))]
    journal += [Expected(2, "signal", "go", "completed", go1)]
    result: list[list[Any]] = [["first", go1]]
    w = winners.get(5)  # {"nap": sleep(0) at 3, "signal": wait "go" at 4}, race at 5
    if w == 0:
        journal += [Expected(3, "sleep", "sleep", "completed", None)]
        journal += [Expected(6, "signal", "go", "completed", go2)]
        result.append(["nap", go2])
        step = 7
    else:
        journal += [Expected(4, "signal", "go", "completed", go2)]
        result.append(["signal", go2])
        step = 6
    journal.append(Expected(5, "race", "race", "completed", w))
    race = step + 2  # {"signal": wait "late", "nap": sleep}, race
    w = winners.get(race)
    if w == 0:
        journal += [Expected(step, "signal", "late", "completed", late)]
        result.append(["signal", late])
    else:
        journal += [Expected(step + 1, "sleep", "sleep", "completed", None)]
        journal += [Expected(step + 3, "signal", "late", "completed", late)]
        result.append(["nap", late])
    journal.append(Expected(race, "race", "race", "completed", w))
    step += 3 if w == 0 else 4
    calls: list[Call] = []
    x = kit.origin(run_id)
    for p, phase in enumerate(plan.phases, start=2):
        act, nap, race = step, step + 1, step + 2
        step += 3
        token = f"{run_id}/{label(p)}"
        calls.append(Call(token, run_id, act, "RACE"))
        w = winners.get(race)
        if w == 0:
            x = act_value(phase.kind, x)
            journal.append(Expected(act, "activity", ACT_NAMES[phase.kind], "completed", x, token))
            result.append(["act", x])
        else:
            journal.append(Expected(nap, "sleep", "sleep", "completed", None))
            x = (x + 1) % MOD
            result.append(["nap", None])
        journal.append(Expected(race, "race", "race", "completed", w))
    journal.sort(key=lambda e: e.step)
    return journal, calls, result


def race_winners(steps: Sequence[Any]) -> dict[int, int]:
    return {s.step: s.result for s in steps if s.kind == "race" and s.status == "completed"}


def race_result_problems(run_id: str, seed: int, got: Any) -> list[str]:
    """The worker's own check of a race run's result (it cannot know the winners ahead)."""
    if not isinstance(got, list) or len(got) != 3 + len(race_plan(run_id, seed).phases):
        return [f"{run_id}: result {got!r} has the wrong shape"]
    winners = {5: 0 if got[1][0] == "nap" else 1}
    step = 7 if winners[5] == 0 else 6
    winners[step + 2] = 0 if got[2][0] == "signal" else 1
    step += 3 if winners[step + 2] == 0 else 4
    for item in got[3:]:
        winners[step + 2] = 0 if item[0] == "act" else 1
        step += 3
    _, _, want = race_journal(run_id, seed, winners)
    return [] if got == want else [f"{run_id}: result {got!r}, expected {want!r}"]


def calls_of(journal: Sequence[Expected], workflow_id: str) -> list[Call]:
    return [Call(e.token, workflow_id, e.step, e.expect) for e in journal if e.token is not None]


# --- the store, read between lifetimes ------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunView:
    info: Any  # WorkflowInfo
    steps: list[Any]  # StepInfo, committed and open

    def record(self, step: int) -> Any | None:
        for s in self.steps:
            if s.step == step and s.status != "open":
                return s
        return None


def read_store(db: Path) -> dict[str, RunView]:
    """Every run in the store with its steps (only while no worker is running)."""
    return asyncio.run(_read_store(db)) if db.exists() else {}


async def _read_store(db: Path) -> dict[str, RunView]:
    from pyweft import Engine

    async with Engine(f"sqlite:///{db}", recover=False) as engine:
        page = await engine.list(limit=1000)
        assert page.next_cursor is None, "more runs than one page"
        return {
            info.id: RunView(await engine.describe(info.id), list(await engine.history(info.id)))
            for info in page.items
        }


def journal_problems(wid: str, view: RunView | None, want: Sequence[Expected]) -> list[str]:
    """The run's steps must be exactly ``want``: nothing missing, extra, or left open."""
    if view is None:
        return [f"{wid}: not in the store"]
    got = [(s.step, s.kind, s.name, s.status, s.result) for s in view.steps]
    exp = [(e.step, e.kind, e.name, e.status, e.result) for e in want]
    if got == exp:
        return []
    extra = [g for g in got if g not in exp]
    missing = [e for e in exp if e not in got]
    return [f"{wid}: journal differs from the plan: unexpected {extra[:4]}, missing {missing[:4]}"]


# --- processes ------------------------------------------------------------------------


def launch(
    tmp: Path, db: Path, ledger: Path, mode: str, n_runs: int, seed: int, lifetime: str
) -> kit.WorkerProcess:
    log = tmp / f"worker-{lifetime}.log"
    offset = ledger.stat().st_size if ledger.exists() else 0
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(db), str(ledger), str(n_runs), str(seed), mode],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "CRASHKIT_LIFETIME": lifetime},
        )
    return kit.WorkerProcess(proc, lifetime, log, offset)


def wait_for_line(
    worker: kit.WorkerProcess, ledger: Path, match: Callable[[kit.Event], bool], timeout: float
) -> bool:
    """Wait until this lifetime wrote a ledger line that ``match``-es; False on timeout/exit."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and worker.proc.poll() is None:
        with open(ledger, "rb") as f:
            f.seek(worker.ledger_offset)
            text = f.read().decode("ascii")
        lines = text[: text.rfind("\n") + 1]  # a line still being written is left for later
        if any(match(e) for e in kit.parse_ledger(lines) if e.lifetime == worker.lifetime):
            return True
        time.sleep(0.003)
    return False


@dataclass(slots=True)
class Campaign:
    """What a kill-and-restart campaign left: who was killed, and the store after each kill."""

    lifetimes: list[str] = field(default_factory=list)  # launch order; the last is the final
    killed: set[str] = field(default_factory=set)
    after_kill: list[dict[str, RunView]] = field(default_factory=list)  # [k]: after lifetimes[k]
    final: dict[str, RunView] = field(default_factory=dict)
    workers: list[kit.WorkerProcess] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def campaign(
    tmp: Path,
    mode: str,
    seed: int,
    n_runs: int,
    kills: int,
    delay_s: tuple[float, float],
    *,
    wait_first: Callable[[kit.WorkerProcess, Path], object] | None = None,
    final_timeout_s: float = 60.0,
) -> Campaign:
    """Start a worker, let it live a seeded random while, SIGKILL it, read the store;
    ``kills`` times. Then a last worker runs everything to the end."""
    db, ledger = tmp / "pyweft.db", tmp / "ledger.txt"
    rng = random.Random(f"{seed}/{mode}/kills")
    out = Campaign()
    for k in range(kills):
        worker = launch(tmp, db, ledger, mode, n_runs, seed, f"k{k:02d}")
        out.workers.append(worker)
        out.lifetimes.append(worker.lifetime)
        try:
            kit.wait_ready(worker, ledger)
            if wait_first is not None:
                wait_first(worker, ledger)
            time.sleep(rng.uniform(*delay_s))
            if not worker.kill():
                raise AssertionError(
                    f"seed {seed} ({mode}; rerun with PYWEFT_CRASH_SEEDS={seed}): worker "
                    f"{worker.lifetime} exited ({worker.proc.returncode}) before kill {k}; the "
                    f"workload is too short for the kills:\n{worker.log_tail()}"
                )
            out.killed.add(worker.lifetime)
        finally:
            worker.ensure_dead()
        out.after_kill.append(read_store(db))
    final = launch(tmp, db, ledger, mode, n_runs, seed, "final")
    out.workers.append(final)
    out.lifetimes.append(final.lifetime)
    try:
        returncode = final.proc.wait(timeout=final_timeout_s)
        if returncode != 0:
            out.problems.append(f"the final worker exited {returncode}:\n{final.log_tail()}")
    except subprocess.TimeoutExpired:
        out.problems.append(
            f"the final worker did not finish in {final_timeout_s}s:\n{final.log_tail()}"
        )
    finally:
        final.ensure_dead()
    out.final = read_store(db)
    events = kit.read_ledger(ledger)
    if not any(e.kind == "DONE" and e.lifetime == "final" for e in events):
        out.problems.append("the final worker wrote no DONE line")
    for w in out.workers:
        text = w.log.read_text(errors="replace") if w.log.exists() else ""
        if any(word in text for word in ("WARNING", "ERROR", "CRITICAL", "Traceback")):
            out.problems.append(f"worker {w.lifetime} logged:\n{w.log_tail()}")
    out.problems += stability_problems(out)
    return out


def stability_problems(c: Campaign) -> list[str]:
    """A record committed before a kill is never rewritten, and no run is created twice:
    every committed step and every run's ``created_at`` stay exactly as first seen."""
    problems: list[str] = []
    for k, snap in enumerate(c.after_kill):
        for later in [*c.after_kill[k + 1 :], c.final]:
            for wid, view in snap.items():
                now = later.get(wid)
                if now is None or now.info.created_at != view.info.created_at:
                    problems.append(f"{wid}: created again after kill {k}")
                    continue
                for s in view.steps:
                    if s.status != "open" and now.record(s.step) != s:
                        problems.append(f"{wid} step {s.step}: committed before kill {k}, changed")
    return sorted(set(problems))


# --- the ledger checker ---------------------------------------------------------------


@dataclass(slots=True)
class Execution:
    begin: kit.Event
    outcome: kit.Event | None = None  # END, FAIL, STOP, or None when the process died first


@dataclass(slots=True)
class CallStats:
    executions: int = 0
    reruns_in_flight: int = 0  # the kill cut the execution before it ended
    reruns_after_end: int = 0  # it ended, the kill cut the commit
    losers_run: int = 0  # executions of race branches that lost
    problems: list[str] = field(default_factory=list)


def executions(events: Sequence[kit.Event]) -> dict[str, list[Execution]]:
    runs: dict[str, list[Execution]] = defaultdict(list)
    open_: dict[tuple[str, str, int], Execution] = {}
    for e in events:
        if e.kind == "BEGIN":
            x = Execution(e)
            runs[e.token].append(x)
            open_[(e.lifetime, e.token, e.n)] = x
        elif e.kind in ("END", "FAIL", "STOP"):
            found = open_.pop((e.lifetime, e.token, e.n), None)
            if found is not None:
                found.outcome = e
            else:
                runs["?"].append(Execution(e))  # reported by check_calls
    return runs


def first_proofs(events: Sequence[kit.Event]) -> dict[tuple[str, int], int]:
    """(run, phase) -> line of the first MARK proving that phase of that run committed."""
    proof: dict[tuple[str, int], int] = {}
    covered: dict[str, int] = defaultdict(int)
    for e in events:
        if e.kind == "MARK":
            for phase in range(covered[e.run] + 1, e.phase + 1):
                proof[(e.run, phase)] = e.index
            covered[e.run] = max(covered[e.run], e.phase)
    return proof


def check_calls(events: Sequence[kit.Event], calls: Sequence[Call], c: Campaign) -> CallStats:
    """Violations of "a committed activity call never runs again". See the test docstring."""
    stats = CallStats()
    problems = stats.problems
    runs = executions(events)
    proofs = first_proofs(events)
    order = {name: i for i, name in enumerate(c.lifetimes)}
    for stray in runs.pop("?", []):
        problems.append(f"line {stray.begin.index}: {stray.begin.kind} without BEGIN")
    by_token = {call.token: call for call in calls}
    for token in sorted(set(runs) - set(by_token)):
        problems.append(f"{token}: executed, but no such activity call is in the plan")
    for call in calls:
        execs = runs.get(call.token, [])
        stats.executions += len(execs)
        record = (
            c.final[call.workflow_id].record(call.step) if call.workflow_id in c.final else None
        )
        committed = record is not None
        where = f"{call.token} ({call.workflow_id} step {call.step})"
        if [x.begin.n for x in execs] != list(range(1, len(execs) + 1)):
            problems.append(f"{where}: execution numbers out of order")
        outcomes = {"END": {"END"}, "FAIL": {"FAIL"}, "RACE": {"END", "STOP"}}[call.expect]
        for x in execs:
            if x.outcome is not None and x.outcome.kind not in outcomes:
                problems.append(f"{where}: line {x.outcome.index} {x.outcome.kind} unexpected")
            if x.outcome is None and x.begin.lifetime not in c.killed:
                problems.append(f"{where}: line {x.begin.index} never finished, yet its process "
                                "exited cleanly")  # fmt: skip
        if call.expect != "RACE" and not committed:
            problems.append(f"{where}: no journal record")
        if committed:
            last = execs[-1] if execs else None
            if last is None or last.outcome is None or last.outcome.kind == "STOP":
                problems.append(f"{where}: committed, but its last execution did not finish")
            elif record.finished_at.timestamp() < last.begin.at:
                problems.append(
                    f"{where}: the journal holds an outcome finished at "
                    f"{record.finished_at.timestamp():.6f}, before execution #{last.begin.n} began "
                    f"at {last.begin.at:.6f} (line {last.begin.index}): it ran again after commit"
                )
        elif call.expect == "RACE":
            stats.losers_run += len(execs)
        for prev, nxt in itertools.pairwise(execs):
            p, n = prev.begin, nxt.begin
            if p.lifetime not in c.killed or order[n.lifetime] <= order[p.lifetime]:
                problems.append(
                    f"{where}: #{p.n} (line {p.index}, {p.lifetime}) ran again as #{n.n} "
                    f"(line {n.index}, {n.lifetime}) although no kill came in between"
                )
            if prev.outcome is None:
                stats.reruns_in_flight += 1
            else:
                stats.reruns_after_end += 1
        for k, snap in enumerate(c.after_kill):
            view = snap.get(call.workflow_id)
            if view is None or view.record(call.step) is None:
                continue
            later = [x.begin for x in execs if order[x.begin.lifetime] > k]
            if later:
                problems.append(
                    f"{where}: committed before kill {k} ({c.lifetimes[k]}), yet it began "
                    f"again at line {later[0].index} ({later[0].lifetime})"
                )
        run, lbl = call.token.split("/")
        proof = proofs.get((run, int(lbl[:3])))
        late = [x.begin for x in execs if proof is not None and x.begin.index > proof]
        if late:
            problems.append(
                f"{where}: began at line {late[0].index}, after line {proof} where the workflow "
                "had already passed its phase (so it was committed)"
            )
    return stats
