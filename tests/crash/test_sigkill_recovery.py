"""SIGKILL a real worker at random moments, restart it, repeat: the core crash promise.

"Each step's outcome is committed atomically before the workflow sees it.
After SIGKILL at any instant, a restarted engine finishes every run with the
right result; a completed activity never runs again; only an activity that
was in flight at the kill may run a second time."

Reproduce one seed with ``PYWEFT_CRASH_SEEDS=23 pytest tests/crash``. The
kill delays replay exactly; thread scheduling inside the worker does not,
so a seed reproduces the conditions, not every interleaving.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyweft import Engine, StepInfo, WorkflowInfo
from support import crashkit as kit
from support.backends import postgres_schema, with_schema

SEEDS = kit.crash_seeds(11, 23, 37, 41, 59)
KILLS_PER_SEED = 12
N_RUNS = 16
KILL_DELAY_S = (0.02, 0.4)  # counted from the worker's START line: imports done, engine not open
FINAL_TIMEOUT_S = 60.0


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The store the workers share: an SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'pyweft.db'}"
    else:
        with postgres_schema() as (url, schema):
            yield with_schema(url, schema)


async def _read_store(
    store: str, ids: list[str]
) -> tuple[dict[str, str], dict[str, tuple[WorkflowInfo, list[StepInfo]]]]:
    async with Engine(store, recover=False) as engine:
        page = await engine.list(limit=1000)
        listed = {info.id: info.status for info in page.items}
        runs = {i: (await engine.describe(i), await engine.history(i)) for i in ids}
    return listed, runs


def _journal_problems(
    run_id: str, seed: int, info: WorkflowInfo, history: list[StepInfo]
) -> list[str]:
    want_result = kit.expected_result(run_id, seed, "mix")
    if info.status != "completed" or info.result != want_result:
        return [f"{run_id}: {info.status} with {info.result!r}, expected completed {want_result}"]
    problems = []
    want = [(k, n, "completed", v) for k, n, v, _ in kit.expected_journal(run_id, seed, "mix")]
    got = [(s.kind, s.name, s.status, s.result) for s in history]
    if got != want:
        diff = next(i for i in range(max(len(got), len(want))) if got[i : i + 1] != want[i : i + 1])
        problems.append(f"{run_id}: journal differs from the plan at step {diff + 1}")
    if [s.step for s in history] != list(range(1, len(history) + 1)):
        problems.append(f"{run_id}: step numbers are not 1..{len(history)}")
    for s in history:
        limit = 2 if s.name == "flaky" else 1  # only the flaky step ever fails an attempt
        if s.kind == "activity" and not 1 <= s.attempts <= limit:
            problems.append(f"{run_id} step {s.step} ({s.name}): {s.attempts} attempts recorded")
    return problems


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_at_random_moments_loses_nothing_and_reruns_only_in_flight_activities(
    tmp_path: Path, store: str, seed: int
) -> None:
    """Kill a worker 12 times at seeded random moments, then let one finish, and check.

    Invariants asserted (``crashkit.check_ledger`` and ``_journal_problems``):

    1. Every run is ``completed`` with the result computed independently from
       its plan, and its journal holds exactly the planned steps, each
       completed with the planned value; a non-flaky activity records one
       attempt, the flaky one at most two.
    2. Every activity call (token ``run/label``) has at least one ``END``.
    3. A committed step never runs again: the workflow writes ``MARK run p``
       right after every step of phase ``p`` returned, which the engine
       allows only once the step is committed. So no ``BEGIN`` of a token of
       phase ``p`` may appear in the ledger after the first ``MARK run q``
       with ``q >= p``, in this process or any later one.
    4. Only an execution cut by a kill runs again: an execution of a token is
       followed by another one only if it ``FAIL``-ed (the flaky step's
       designed failure, allowed on its execution #1 only), or it began in a
       process the test SIGKILLed and the next execution begins in a later
       process. Hence no process runs a completed activity twice, an
       execution that ``END``-ed repeats only when its process died before
       the commit was proven (the commit was cut), and a process that exited
       cleanly finished everything it began.
    5. Every journal record is the outcome of its token's last execution: its
       ``finished_at`` (taken after the activity returned, before the commit)
       is not earlier than that execution's ``BEGIN``. So each earlier
       execution was never committed, which also covers a kill landing
       between a commit and the ``MARK`` that would have proven it.
    6. Each of the 12 kills hit a live worker; the final worker exits 0 after
       checking every result itself and logs no warning, error or traceback.
    """
    where = f"{store.split(':')[0]}, seed {seed} (rerun with PYWEFT_CRASH_SEEDS={seed})"
    ledger = tmp_path / "ledger.txt"
    rng = random.Random(seed)
    killed: set[str] = set()
    workers: list[kit.WorkerProcess] = []
    for k in range(KILLS_PER_SEED):
        worker = kit.launch(tmp_path, store, ledger, N_RUNS, seed, f"kill{k:02d}")
        workers.append(worker)
        try:
            kit.wait_ready(worker, ledger)
            time.sleep(rng.uniform(*KILL_DELAY_S))
            if not worker.kill():
                pytest.fail(
                    f"{where}: worker {worker.lifetime} exited ({worker.proc.returncode}) before "
                    f"kill {k}; the workload is too short for the kills:\n{worker.log_tail()}"
                )
            killed.add(worker.lifetime)
        finally:
            worker.ensure_dead()

    final = kit.launch(tmp_path, store, ledger, N_RUNS, seed, "final")
    workers.append(final)
    try:
        returncode = final.proc.wait(timeout=FINAL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"{where}: the final worker did not finish in {FINAL_TIMEOUT_S}s:\n{final.log_tail()}"
        )
    finally:
        final.ensure_dead()
    assert returncode == 0, f"{where}: final worker exited {returncode}:\n{final.log_tail()}"

    ids = [f"run-{i}" for i in range(N_RUNS)]
    listed, runs = asyncio.run(_read_store(store, ids))
    assert listed == dict.fromkeys(ids, "completed"), f"{where}: stored runs {listed}"
    problems = [p for i in ids for p in _journal_problems(i, seed, *runs[i])]

    events = kit.read_ledger(ledger)
    tokens = {t: k for i in ids for t, k in kit.expected_tokens(i, seed, "mix").items()}
    finished = {
        t: at for i in ids for t, at in kit.committed_at(i, seed, "mix", runs[i][1]).items()
    }
    stats = kit.check_ledger(events, tokens, killed, finished)
    problems += stats.problems
    if not any(e.kind == "DONE" and e.lifetime == "final" for e in events):
        problems.append("the final worker wrote no DONE line")
    for worker in workers:
        text = worker.log.read_text(errors="replace")
        if any(word in text for word in ("WARNING", "ERROR", "CRITICAL", "Traceback")):
            problems.append(f"worker {worker.lifetime} logged:\n{worker.log_tail()}")
    assert not problems, f"{where}: {len(problems)} problem(s):\n" + "\n".join(problems[:30])
    print(
        f"{where}: {len(killed)} kills, {stats.executions} executions of {len(tokens)} calls, "
        f"{stats.reruns_in_flight} re-runs of in-flight calls, {stats.reruns_after_end} re-runs "
        f"after END with the commit cut, {stats.retries} retries"
    )
