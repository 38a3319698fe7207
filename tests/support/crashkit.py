"""Shared pieces of the SIGKILL crash tests (``tests/crash``).

Three parts:

* the **plan** of every run: a pure function of ``(run_id, seed, mode)`` that
  the worker's workflow follows and from which the test computes the right
  result and the right journal without running anything;
* the **ledger**: an append-only file where every activity execution writes
  ``BEGIN`` before its work and ``END`` (or ``FAIL``) after it, and the
  workflow writes ``MARK`` after each step returns. Each line is a single
  ``os.write`` on an ``O_APPEND`` descriptor, so a line is either entirely in
  the file or not at all after SIGKILL, and file order is real-time order;
* the **checker** that turns the ledger into violations of the durability
  promise, and the helpers that start, wait for and kill worker processes.

Line format: ``KIND LIFETIME RUN LABEL N TIME`` where LIFETIME names one worker
process, LABEL is ``PPP`` or ``PPPL``/``PPPR`` (PPP = phase number, L/R = the
two branches of a concurrent pair), and N numbers the executions of one
activity call (token ``RUN/LABEL``) across all lifetimes, starting at 1.
TIME is ``time.time()`` when the line was written.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKER = Path(__file__).resolve().parents[1] / "crash" / "worker.py"
MOD = 1_000_003
NAP_S = 1.0  # the timer test's sleep: long enough to be caught while pending
WORK_CHOICES = (0.002, 0.01, 0.02, 0.04, 0.06)
ACTIVITY_NAMES = {"async": "twist", "sync": "crunch", "flaky": "flaky"}


# --- plans and the right answers --------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    kind: str  # "async" | "sync" | "flaky" | "pair" | "sleep"
    work_s: float = 0.0  # activity work, or the sleep duration
    work2_s: float = 0.0  # the right-hand branch of a pair


def plan_for(run_id: str, seed: int, mode: str) -> list[Step]:
    """The steps run ``run_id`` takes, in order. Deterministic across processes."""
    if mode == "nap":
        return [Step("async"), Step("sleep", NAP_S), Step("sync")]
    rng = random.Random(f"{seed}/{run_id}")  # str seeds hash with sha512: stable

    def work() -> float:
        return rng.choice(WORK_CHOICES)

    steps = [
        Step("async", work()),
        Step("sleep", rng.uniform(0.01, 0.05)),
        Step("sync", work()),
        Step("flaky", work()),
        Step("pair", work(), work()),
    ]
    # run-0 is always long so the workload outlasts every planned kill.
    tail = 180 if run_id == "run-0" else rng.randint(10, 160)
    kinds = ("async", "sync", "flaky", "pair", "sleep")
    for kind in rng.choices(kinds, weights=(5, 5, 1, 2, 1), k=tail):
        if kind == "sleep":
            steps.append(Step("sleep", rng.uniform(0.01, 0.05)))
        else:
            steps.append(Step(kind, work(), work() if kind == "pair" else 0.0))
    return steps


def label(phase: int, branch: str = "") -> str:
    return f"{phase:03d}{branch}"


def origin(run_id: str) -> int:
    return zlib.crc32(run_id.encode()) % MOD


def twist_value(x: int) -> int:
    return (x * 31 + 17) % MOD


def crunch_value(x: int) -> int:
    return (x * x + 3) % MOD


def flaky_value(x: int) -> int:
    return (x * 7 + 5) % MOD


def combine(left: int, right: int) -> int:
    return (left * 13 + right) % MOD


VALUE = {"async": twist_value, "sync": crunch_value, "flaky": flaky_value}


def expected_journal(
    run_id: str, seed: int, mode: str
) -> list[tuple[str, str, int | None, str | None]]:
    """``(kind, name, result, token)`` of every journal step, in step order."""
    x = origin(run_id)
    out: list[tuple[str, str, int | None, str | None]] = []
    for phase, step in enumerate(plan_for(run_id, seed, mode), start=1):
        token = f"{run_id}/{label(phase)}"
        if step.kind == "sleep":
            out.append(("sleep", "sleep", None, None))
        elif step.kind == "pair":
            left, right = twist_value(x), crunch_value(x)
            out.append(("activity", "twist", left, token + "L"))
            out.append(("activity", "crunch", right, token + "R"))
            x = combine(left, right)
        else:
            x = VALUE[step.kind](x)
            out.append(("activity", ACTIVITY_NAMES[step.kind], x, token))
    return out


def committed_at(run_id: str, seed: int, mode: str, history: Sequence[Any]) -> dict[str, float]:
    """Token -> ``finished_at`` (epoch) of its journal record, from ``engine.history``."""
    tokens = [t for _, _, _, t in expected_journal(run_id, seed, mode)]
    return {
        token: s.finished_at.timestamp()
        for token, s in zip(tokens, history, strict=False)
        if token is not None and s.finished_at is not None
    }


def expected_result(run_id: str, seed: int, mode: str) -> int:
    x = origin(run_id)
    for step in plan_for(run_id, seed, mode):
        if step.kind == "pair":
            x = combine(twist_value(x), crunch_value(x))
        elif step.kind != "sleep":
            x = VALUE[step.kind](x)
    return x


def expected_tokens(run_id: str, seed: int, mode: str) -> dict[str, str]:
    """Every activity call of the run: token -> step kind."""
    tokens: dict[str, str] = {}
    for phase, step in enumerate(plan_for(run_id, seed, mode), start=1):
        if step.kind == "pair":
            tokens[f"{run_id}/{label(phase, 'L')}"] = "async"
            tokens[f"{run_id}/{label(phase, 'R')}"] = "sync"
        elif step.kind != "sleep":
            tokens[f"{run_id}/{label(phase)}"] = step.kind
    return tokens


# --- the ledger -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    index: int  # line number: file order is the order the writes happened in
    kind: str  # START | BEGIN | END | FAIL | MARK | DONE
    lifetime: str
    run: str
    label: str
    n: int
    at: float  # time.time() just before the line was written

    @property
    def token(self) -> str:
        return f"{self.run}/{self.label}"

    @property
    def phase(self) -> int:
        return int(self.label[:3])


def parse_ledger(text: str) -> list[Event]:
    events = []
    for i, line in enumerate(text.splitlines()):
        kind, lifetime, run, lbl, n, at = line.split(" ")  # a torn line fails loudly here
        events.append(Event(i, kind, lifetime, run, lbl, int(n), float(at)))
    return events


def read_ledger(path: str | os.PathLike[str]) -> list[Event]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="ascii") as f:
        return parse_ledger(f.read())


class Ledger:
    """The worker's side: append one line per event, durably."""

    def __init__(self, path: str | os.PathLike[str], lifetime: str) -> None:
        self.lifetime = lifetime
        self._begins = Counter(e.token for e in read_ledger(path) if e.kind == "BEGIN")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()  # sync activities write from executor threads

    def _write(
        self, kind: str, run: str = "-", lbl: str = "-", n: int = 0, sync: bool = True
    ) -> None:
        line = f"{kind} {self.lifetime} {run} {lbl} {n} {time.time():.6f}\n"
        os.write(self._fd, line.encode("ascii"))
        if sync:
            os.fsync(self._fd)

    def start(self) -> None:
        self._write("START")

    def done(self) -> None:
        self._write("DONE")

    def begin(self, run: str, lbl: str) -> int:
        """Record that an execution starts; returns its number for this token (1-based)."""
        with self._lock:
            n = self._begins[f"{run}/{lbl}"] + 1
            self._begins[f"{run}/{lbl}"] = n
            self._write("BEGIN", run, lbl, n)
            return n

    def end(self, run: str, lbl: str, n: int) -> None:
        with self._lock:
            self._write("END", run, lbl, n)

    def fail(self, run: str, lbl: str, n: int) -> None:
        with self._lock:
            self._write("FAIL", run, lbl, n)

    def mark(self, run: str, phase: int) -> None:
        # Only SIGKILL is simulated, and the page cache survives it, so the
        # workflow's marks (written again on every replay) skip the fsync.
        with self._lock:
            self._write("MARK", run, label(phase), 0, sync=False)


# --- the checker ------------------------------------------------------------------


@dataclass(slots=True)
class Execution:
    begin: Event
    outcome: Event | None = None  # END, FAIL, or None when the process died first


@dataclass(slots=True)
class LedgerStats:
    executions: int = 0
    reruns_after_end: int = 0  # END written, commit cut by the kill: legitimately ran again
    reruns_in_flight: int = 0  # no END before the kill
    retries: int = 0
    problems: list[str] = field(default_factory=list)


def check_ledger(
    events: list[Event],
    tokens: dict[str, str],
    killed: set[str],
    committed_at: dict[str, float] | None = None,
) -> LedgerStats:
    """Violations of "a completed activity never runs again". See the test docstring.

    ``committed_at`` maps a token to the ``finished_at`` its journal record
    holds (taken after the activity returned, just before the commit).
    """
    stats = LedgerStats()
    problems = stats.problems
    runs: dict[str, list[Execution]] = defaultdict(list)
    open_: dict[tuple[str, str, int], Execution] = {}
    first_proof: dict[tuple[str, int], int] = {}  # (run, phase) -> first MARK index >= phase
    marks: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        if e.kind == "BEGIN":
            started = Execution(e)
            runs[e.token].append(started)
            open_[(e.lifetime, e.token, e.n)] = started
        elif e.kind in ("END", "FAIL"):
            ended = open_.pop((e.lifetime, e.token, e.n), None)
            if ended is None:
                problems.append(f"line {e.index}: {e.kind} without BEGIN for {e.token} #{e.n}")
            else:
                ended.outcome = e
        elif e.kind == "MARK":
            marks[e.run].append(e)
    for run, run_marks in marks.items():
        covered = 0  # marks are in file order: the first one reaching a phase proves it
        for m in run_marks:
            for phase in range(covered + 1, m.phase + 1):
                first_proof[(run, phase)] = m.index
            covered = max(covered, m.phase)
    for token in sorted(set(runs) - set(tokens)):
        problems.append(f"{token}: executed but no such activity call is in the plan")
    for token, kind in sorted(tokens.items()):
        execs = runs.get(token, [])
        stats.executions += len(execs)
        if not any(x.outcome is not None and x.outcome.kind == "END" for x in execs):
            problems.append(f"{token}: never completed (no END line)")
        if [x.begin.n for x in execs] != list(range(1, len(execs) + 1)):
            problems.append(f"{token}: execution numbers out of order {[x.begin.n for x in execs]}")
        run, lbl = token.split("/")
        proof = first_proof.get((run, int(lbl[:3])))
        finished = (committed_at or {}).get(token)
        if execs and finished is not None and finished < execs[-1].begin.at:
            problems.append(
                f"{token}: the journal holds the outcome of an execution that finished at "
                f"{finished:.6f}, before #{execs[-1].begin.n} began at {execs[-1].begin.at:.6f}: "
                "a committed activity ran again"
            )
        for i, x in enumerate(execs):
            where = f"{token} #{x.begin.n} (lifetime {x.begin.lifetime}, line {x.begin.index})"
            if proof is not None and x.begin.index > proof:
                problems.append(
                    f"{where} began after line {proof}, where the workflow had already passed "
                    "this step, so its outcome was committed: a completed activity ran again"
                )
            if x.outcome is None and x.begin.lifetime not in killed:
                problems.append(f"{where} never finished although its process exited cleanly")
            if x.outcome is not None and x.outcome.kind == "FAIL":
                if kind != "flaky" or x.begin.n != 1:
                    problems.append(f"{where} failed, but only a flaky step's first run fails")
                stats.retries += i + 1 < len(execs)
                continue
            if i + 1 == len(execs):
                continue
            nxt = execs[i + 1].begin
            if x.outcome is None:
                stats.reruns_in_flight += 1
            else:
                stats.reruns_after_end += 1
            if x.begin.lifetime not in killed:
                problems.append(
                    f"{where} ran again (line {nxt.index}) but its process was not killed"
                )
            elif nxt.lifetime == x.begin.lifetime:
                problems.append(
                    f"{where} ran again in the same process (line {nxt.index}) without failing"
                )
    return stats


# --- worker processes -----------------------------------------------------------


@dataclass(slots=True)
class WorkerProcess:
    proc: subprocess.Popen[bytes]
    lifetime: str
    log: Path
    ledger_offset: int  # where this lifetime's lines begin in the ledger

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def ensure_dead(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def kill(self) -> bool:
        """SIGKILL the worker; False if it had already exited on its own."""
        if self.proc.poll() is not None:
            return False
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        return True


def launch(
    tmp: Path,
    db: Path | str,
    ledger: Path,
    n_runs: int,
    seed: int,
    lifetime: str,
    mode: str = "mix",
) -> WorkerProcess:
    """Start a worker on ``db``: an SQLite file, or any store URL."""
    log = tmp / f"worker-{lifetime}.log"
    offset = ledger.stat().st_size if ledger.exists() else 0
    env = {**os.environ, "CRASHKIT_LIFETIME": lifetime}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(db), str(ledger), str(n_runs), str(seed), mode],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    return WorkerProcess(proc, lifetime, log, offset)


def wait_ready(worker: WorkerProcess, ledger: Path, timeout: float = 30.0) -> None:
    """Block until the worker has written its START line (imports done)."""
    needle = f"START {worker.lifetime} ".encode()
    deadline = time.monotonic() + timeout
    while True:
        if ledger.exists():
            with open(ledger, "rb") as f:
                f.seek(worker.ledger_offset)
                if needle in f.read():
                    return
        if worker.proc.poll() is not None:
            raise AssertionError(
                f"worker {worker.lifetime} exited with {worker.proc.returncode} before it was "
                f"ready:\n{worker.log_tail()}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"worker {worker.lifetime} not ready after {timeout}s")
        time.sleep(0.002)


def crash_seeds(*seeds: int) -> list[Any]:
    """Seeds for a parametrised SIGKILL test: the first runs in the default suite, the
    rest are marked ``slow`` and run in CI's own crash step (``tests/crash -m slow``),
    which keeps the README's test command within its time budget while CI still
    kills processes with every seed. ``PYWEFT_CRASH_SEEDS=1,2,3`` picks the seeds
    instead (all in the default run)."""
    import pytest

    chosen = [int(x) for x in os.environ.get("PYWEFT_CRASH_SEEDS", "").split(",") if x.strip()]
    if chosen:
        return chosen
    first, *rest = seeds
    return [first, *(pytest.param(s, marks=pytest.mark.slow) for s in rest)]
