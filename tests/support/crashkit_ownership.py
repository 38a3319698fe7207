"""Plans, processes and checks for the ownership tests with real processes on PostgreSQL.

Used by ``tests/crash/ownership_worker.py`` (one engine per process) and
``tests/crash/test_ownership_processes.py``. Builds on :mod:`support.crashkit`:
the same append-only ledger (one ``os.write`` per line on an ``O_APPEND``
descriptor, fsynced, so file order is real-time order across processes), the
same ``KIND LIFETIME RUN LABEL N TIME`` lines and the same
:class:`~support.crashkit.WorkerProcess` to start, kill and clean up workers.

The workload. Run ``r0042`` runs ``steps`` activity steps, phase ``p`` being
the activity call with token ``r0042/00p``. Each execution of the activity
writes ``BEGIN`` (numbered ``n``, counted per token *within its process*, so an
execution is identified by ``(lifetime, n)``), sleeps ``work_s``, writes
``END`` and returns ``{"v": twist(x), "by": lifetime, "n": n, "pid": pid}``: the
journal therefore names the very execution whose outcome it committed. An
execution that sees its cancellation writes ``CANCEL`` instead of ``END``.
After step ``p`` returned (so after it was committed) the workflow writes
``MARK r0042 00p``, the proof used by the ledger rule.

Extra ledger kinds (``NOTE``-like lines: ``KIND LIFETIME FIELD TEXT N TIME``):

``OPENING``  the worker is about to open its engine (a ``lease`` engine may wait here)
``OPEN``     the engine is open: FIELD = the engine's instance id, N = its lease epoch
``HEALTH``   ``lease_health()``: FIELD = state, TEXT = holder id, N = epoch
``STORE``    ``store_ownership()``: FIELD = lease holder, TEXT = mode, N = lease epoch
``STARTED``  the worker started its share of the runs (N = how many)
``ALLDONE``  the worker saw every run of the workload completed
``TERM``     a graceful stop was requested (SIGTERM); ``STOPPED`` once shutdown returned
``DEPOSED``  a ``LeaseLostWarning`` was raised in this process; ``CLOSED`` once the
             engine had torn itself down
``CLAIMLOST`` a per-run claim was lost (``workflow-lease``): FIELD = run id
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support import crashkit as kit

WORKER = Path(__file__).resolve().parents[1] / "crash" / "ownership_worker.py"
ACTIVITY = "owned_step"

EXIT_DONE = 0
EXIT_STOPPED = 10
EXIT_DEPOSED = 20


# --- plans and the right answers ----------------------------------------------------


def run_id(i: int) -> str:
    return f"r{i:04d}"


def expected_values(rid: str, steps: int) -> list[int]:
    """The ``v`` of each step's result, in step order."""
    x = kit.origin(rid)
    out = []
    for _ in range(steps):
        x = kit.twist_value(x)
        out.append(x)
    return out


def expected_result(rid: str, steps: int) -> int:
    return expected_values(rid, steps)[-1]


def tokens_of(rid: str, steps: int) -> list[str]:
    return [f"{rid}/{kit.label(p)}" for p in range(1, steps + 1)]


# --- the ledger ---------------------------------------------------------------------


class OwnershipLedger(kit.Ledger):
    """The worker's ledger: per-process execution numbers, notes, cancellations."""

    def __init__(self, path: str | os.PathLike[str], lifetime: str) -> None:
        super().__init__(path, lifetime)
        # Executions are numbered per process: several processes write at once, so a
        # count read from the file at start-up would not be unique. (lifetime, n) is.
        self._begins.clear()

    def note(self, kind: str, text1: str = "-", text2: str = "-", n: int = 0) -> None:
        text1, text2 = text1 or "-", text2 or "-"
        if " " in text1 or " " in text2:
            raise ValueError(f"ledger fields must be free of spaces: {text1!r} {text2!r}")
        with self._lock:
            self._write(kind, text1, text2, n)

    def cancel(self, run: str, lbl: str, n: int) -> None:
        with self._lock:
            self._write("CANCEL", run, lbl, n)


def read(ledger: Path) -> list[kit.Event]:
    return kit.read_ledger(ledger)


def lines(events: Iterable[kit.Event], kind: str, lifetime: str | None = None) -> list[kit.Event]:
    return [e for e in events if e.kind == kind and (lifetime is None or e.lifetime == lifetime)]


# --- worker processes ---------------------------------------------------------------


@dataclass(slots=True)
class WorkerConfig:
    url: str
    ledger: str
    control: str  # a directory: the files "go" and "stop" in it are commands
    ownership: str
    total: int  # runs r0000 .. r{total-1} make up the workload
    start: Sequence[int] = ()  # the indexes this worker starts (on_conflict="use_existing")
    steps: int = 4
    work_s: float = 0.2
    wait_go: bool = False  # wait for CONTROL/go before starting runs
    hold: bool = False  # after ALLDONE, wait for CONTROL/stop (or SIGTERM) before exiting
    poll_interval: float = 0.1
    lease_ttl: float = 5.0
    lease_renew_interval: float = 1.0
    lease_wait_timeout: float = 60.0
    claim_ttl: float = 3.0
    claim_renew_interval: float = 0.5

    def to_json(self) -> str:
        data = {k: getattr(self, k) for k in self.__slots__}
        data["start"] = list(self.start)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> WorkerConfig:
        return cls(**json.loads(text))


def launch(tmp: Path, lifetime: str, config: WorkerConfig) -> kit.WorkerProcess:
    """Start ``ownership_worker.py`` with ``config``; output goes to ``tmp/proc-LIFETIME.log``."""
    log = tmp / f"proc-{lifetime}.log"
    ledger = Path(config.ledger)
    offset = ledger.stat().st_size if ledger.exists() else 0
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), config.to_json()],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "CRASHKIT_LIFETIME": lifetime, "PYTHONWARNINGS": "default"},
        )
    return kit.WorkerProcess(proc, lifetime, log, offset)


async def wait_line(
    ledger: Path,
    worker: kit.WorkerProcess | None,
    kind: str,
    lifetime: str | None = None,
    *,
    count: int = 1,
    timeout: float = 30.0,
) -> list[kit.Event]:
    """Wait until the ledger holds ``count`` lines of ``kind`` (of ``lifetime``)."""
    deadline = time.monotonic() + timeout
    while True:
        found = lines(read(ledger), kind, lifetime)
        if len(found) >= count:
            return found
        if worker is not None and worker.proc.poll() is not None:
            raise AssertionError(
                f"{worker.lifetime} exited ({worker.proc.returncode}) before writing {count} "
                f"{kind} line(s):\n{worker.log_tail()}"
            )
        if time.monotonic() > deadline:
            tail = worker.log_tail() if worker is not None else ""
            raise AssertionError(
                f"no {count} {kind} line(s) of {lifetime} after {timeout}s\n{tail}"
            )
        await asyncio.sleep(0.02)


async def exited(worker: kit.WorkerProcess, timeout: float) -> int:
    """The worker's exit code, waiting up to ``timeout`` seconds for it to end on its own."""
    deadline = time.monotonic() + timeout
    while worker.proc.poll() is None:
        if time.monotonic() > deadline:
            worker.ensure_dead()
            raise AssertionError(
                f"{worker.lifetime} still running after {timeout}s:\n{worker.log_tail()}"
            )
        await asyncio.sleep(0.02)
    return worker.proc.returncode


def log_problems(workers: Sequence[kit.WorkerProcess], allowed: Sequence[str] = ()) -> list[str]:
    """Workers whose output shows an error or a traceback, ignoring lines with ``allowed``."""
    found = []
    for w in workers:
        text = w.log.read_text(errors="replace") if w.log.exists() else ""
        bad = [
            line
            for line in text.splitlines()
            if any(word in line for word in ("ERROR", "CRITICAL", "Traceback"))
            and not any(a in line for a in allowed)
        ]
        if bad:
            found.append(f"{w.lifetime} logged:\n{w.log_tail()}")
    return found


# --- the store ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    step: int
    status: str
    v: int | None
    by: str | None
    n: int | None
    finished_at: float | None


@dataclass(frozen=True, slots=True)
class StoredRun:
    id: str
    status: str
    result: Any
    steps: list[Step]


async def read_runs(url: str, ids: Sequence[str]) -> dict[str, StoredRun]:
    """Every run's state and journal, read through a non-recovering engine (after the
    workers are gone: it never drives or writes anything but an absent schema marker)."""
    from pyweft import Engine

    out: dict[str, StoredRun] = {}
    async with Engine(url, role="client") as engine:
        for rid in ids:
            info = await engine.describe(rid)
            steps = []
            for s in await engine.history(rid):
                r = s.result if isinstance(s.result, dict) else {}
                steps.append(
                    Step(
                        s.step,
                        s.status,
                        r.get("v"),
                        r.get("by"),
                        r.get("n"),
                        s.finished_at.timestamp() if s.finished_at is not None else None,
                    )
                )
            out[rid] = StoredRun(rid, info.status, info.result, steps)
    return out


def journal_problems(run: StoredRun, steps: int, lifetimes: set[str]) -> list[str]:
    """The run completed once, with the planned result and exactly the planned journal."""
    want = expected_values(run.id, steps)
    if run.status != "completed" or run.result != want[-1]:
        return [f"{run.id}: {run.status} with {run.result!r}, expected completed {want[-1]}"]
    problems = []
    if [s.step for s in run.steps] != list(range(1, steps + 1)):
        problems.append(f"{run.id}: step numbers {[s.step for s in run.steps]}, want 1..{steps}")
    for s, v in zip(run.steps, want, strict=False):
        if s.status != "completed" or s.v != v:
            problems.append(f"{run.id} step {s.step}: {s.status} v={s.v}, expected {v}")
        if s.by not in lifetimes or not isinstance(s.n, int):
            problems.append(f"{run.id} step {s.step}: executed by {s.by!r} #{s.n}?")
    return problems


# --- the ledger rule ------------------------------------------------------------------


@dataclass(slots=True)
class Execution:
    begin: kit.Event
    outcome: kit.Event | None = None  # END, CANCEL, or None (process killed / stopped)

    @property
    def key(self) -> tuple[str, int]:
        return (self.begin.lifetime, self.begin.n)


@dataclass(slots=True)
class LedgerReport:
    executions: int = 0
    tokens: int = 0
    extra_executions: int = 0  # executions besides the committed one
    by_kind: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    problems: list[str] = field(default_factory=list)


def check_ledger(
    events: list[kit.Event],
    runs: dict[str, StoredRun],
    steps: int,
    *,
    killed: frozenset[str] = frozenset(),
    zombie: str | None = None,
    zombie_after: float | None = None,
    strict_once: bool = False,
    stopped: str | None = None,
) -> LedgerReport:
    """Check the ledger against the journals. Rules (``problems`` lists every violation):

    1. Every activity call has exactly one committed execution: the journal's
       ``(by, n)`` names an execution in the ledger that ``END``-ed, before the
       first ``MARK`` proving its phase, and not after the journal's ``finished_at``.
    2. A committed step never runs again: no ``BEGIN`` of a token after the first
       ``MARK`` that proves its phase, except by the deposed ``zombie`` after
       ``zombie_after`` (its user code may run, but its outcome must never commit).
       The zombie's uncommitted executions are counted, not faulted.
    3. No execution other than the committed one ``END``-s in a process that was
       neither killed nor the zombie, unless it was cancelled (``CANCEL``): two live,
       healthy engines never both complete the same step.
    4. Every execution that never finished belongs to a killed or stopped
       process: one that exited cleanly finished or cancelled what it began.
    5. ``strict_once``: every call has exactly one ``END`` in the whole ledger (the
       graceful hand-over runs nothing twice to completion), except an ``END`` of the
       gracefully ``stopped`` process whose result its shutdown dropped: that execution
       is not committed, is its only execution of the call, and is the last execution
       it began in that run (the shutdown cut the run right there). Counted as
       ``dropped-by-shutdown``: pyweft's shutdown cancels a step whose activity has
       returned but whose commit has not landed (see the xfail test
       ``test_graceful_shutdown_commits_an_activity_result_it_already_has``).
    6. The zombie commits nothing it did after ``zombie_after`` (when it was
       stopped): each committed execution of the zombie ENDed before it.
    """
    report = LedgerReport()
    problems = report.problems
    execs: dict[str, list[Execution]] = defaultdict(list)
    by_key: dict[tuple[str, str, int], Execution] = {}
    marks: dict[str, list[kit.Event]] = defaultdict(list)
    for e in events:
        if e.kind == "BEGIN":
            x = Execution(e)
            if (e.lifetime, e.token, e.n) in by_key:
                problems.append(f"line {e.index}: duplicate BEGIN {e.lifetime} {e.token} #{e.n}")
            by_key[(e.lifetime, e.token, e.n)] = x
            execs[e.token].append(x)
        elif e.kind in ("END", "CANCEL"):
            began = by_key.get((e.lifetime, e.token, e.n))
            if began is None or began.outcome is not None:
                problems.append(f"line {e.index}: {e.kind} without an open BEGIN ({e.token})")
            else:
                began.outcome = e
        elif e.kind == "MARK":
            marks[e.run].append(e)
    proof: dict[str, kit.Event] = {}
    for marked, ms in marks.items():
        covered = 0
        for m in ms:
            for p in range(covered + 1, m.phase + 1):
                proof[f"{marked}/{kit.label(p)}"] = m
            covered = max(covered, m.phase)
    last: dict[tuple[str, str], int] = {}  # (lifetime, run) -> index of its last BEGIN
    for e in events:
        if e.kind == "BEGIN":
            last[(e.lifetime, e.run)] = e.index
    planned = {t for rid in runs for t in tokens_of(rid, steps)}
    for token in sorted(set(execs) - planned):
        problems.append(f"{token}: executed but not part of the workload")
    for rid, run in sorted(runs.items()):
        for s, token in zip(run.steps, tokens_of(rid, steps), strict=False):
            report.tokens += 1
            xs = execs.get(token, [])
            report.executions += len(xs)
            report.extra_executions += max(0, len(xs) - 1)
            committed = next((x for x in xs if x.key == (s.by, s.n)), None)
            if committed is None:
                problems.append(
                    f"{token}: the journal names execution {s.by} #{s.n}, not in ledger"
                )
                continue
            if committed.outcome is None or committed.outcome.kind != "END":
                problems.append(f"{token}: the committed execution {s.by} #{s.n} did not END")
                continue
            first_mark = proof.get(token)
            if first_mark is None:
                problems.append(f"{token}: no MARK proves the step was committed")
            elif committed.outcome.index > first_mark.index:
                problems.append(f"{token}: committed execution ENDed after the proof MARK")
            if s.finished_at is not None and s.finished_at < committed.outcome.at - 0.001:
                problems.append(f"{token}: journal finished_at precedes the committed END")
            if (
                zombie is not None
                and zombie_after is not None
                and s.by == zombie
                and committed.outcome.at >= zombie_after
            ):
                problems.append(
                    f"{token}: the zombie {zombie} committed an execution that ended after "
                    f"it was stopped ({committed.outcome.at:.3f} >= {zombie_after:.3f})"
                )
            dropped = [x for x in xs if _dropped_by_shutdown(x, committed, xs, stopped, last)]
            ends = [
                x
                for x in xs
                if x.outcome is not None and x.outcome.kind == "END" and x not in dropped
            ]
            if strict_once and len(ends) != 1:
                problems.append(
                    f"{token}: {len(ends)} completed executions "
                    f"{[(x.key, x.begin.index) for x in ends]}; a graceful hand-over runs "
                    "each step to completion once"
                )
            for x in xs:
                where = f"{token} {x.begin.lifetime} #{x.begin.n} (line {x.begin.index})"
                zombie_run = x.begin.lifetime == zombie and x is not committed
                zombie_late = (
                    zombie_run and zombie_after is not None and (x.begin.at >= zombie_after)
                )
                if x is committed:
                    kind = "committed"
                elif x.begin.lifetime in killed:
                    kind = "killed-" + ("ended" if x.outcome else "in-flight")
                elif zombie_run:
                    kind = "zombie-" + (x.outcome.kind.lower() if x.outcome else "unfinished")
                elif x.outcome is not None and x.outcome.kind == "CANCEL":
                    kind = "cancelled"
                elif x in dropped:
                    kind = "dropped-by-shutdown"
                else:
                    kind = "other"
                report.by_kind[kind] += 1
                if first_mark is not None and x.begin.index > first_mark.index and not zombie_late:
                    problems.append(
                        f"{where} began after line {first_mark.index} proved the step committed: "
                        "a committed activity ran again"
                    )
                if kind == "other":
                    state = x.outcome.kind if x.outcome else "never finished"
                    problems.append(
                        f"{where} is not the committed execution ({s.by} #{s.n}), {state}, and "
                        "its process was neither killed nor deposed"
                    )
    return report


def _dropped_by_shutdown(
    x: Execution,
    committed: Execution,
    xs: list[Execution],
    stopped: str | None,
    last: dict[tuple[str, str], int],
) -> bool:
    """An END of the gracefully stopped process that its shutdown cut before the commit."""
    lifetime = x.begin.lifetime
    return (
        stopped is not None
        and lifetime == stopped
        and x is not committed
        and x.outcome is not None
        and x.outcome.kind == "END"
        and sum(1 for y in xs if y.begin.lifetime == lifetime) == 1
        and last.get((lifetime, x.begin.run)) == x.begin.index
    )
