"""SIGKILL around messages: a signal, update, review decision or cancel that was
acknowledged survives, and is acted on exactly once.

A worker process (``messages_worker.py serve``) drives the runs on one store
(every test runs twice: on an SQLite file and on a fresh PostgreSQL schema)
with ``poll_interval=0.05``. Messages come from other processes: the test
process itself (an ``Engine(recover=False)`` on the same store) or sender
processes (``messages_worker.py send``), so the only way a message reaches the
workflow is through the store. The worker is SIGKILLed either at seeded random
moments or at one exact commit: its storage is a ``KillSwitchStorage`` wrapping
the real store that kills its own process right before (or right
after) the batch that consumes the signal / applies the update / records the
review decision. Nothing in ``src/`` is patched.

Reproduce one seed with ``PYWEFT_CRASH_SEEDS=23 pytest tests/crash/test_sigkill_messages.py``.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from pyweft import Engine, HistoryEvent, StepInfo, WorkflowTerminalError
from support import crashkit as kit
from support import crashkit_messages as kitm
from support.backends import postgres_schema, with_schema
from support.poll import eventually

SEEDS = kit.crash_seeds(11, 23)
KILLS = 6
KILL_DELAY_S = (0.05, 0.45)  # counted from the worker's START line (engine open, runs exist)
FINAL_TIMEOUT_S = 60.0
SIGKILLED = -signal.SIGKILL


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path | str]:
    """Where the processes meet: an SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield tmp_path / "pyweft.db"
    else:
        with postgres_schema() as (url, schema):
            yield with_schema(url, schema)


@asynccontextmanager
async def _engine(db: Path | str) -> AsyncIterator[Engine]:
    """The test's own engine on the worker's file: it sends and inspects, never drives."""
    url = db if isinstance(db, str) else f"sqlite:///{db}"
    async with Engine(url, role="client", poll_interval=kitm.POLL_S) as engine:
        yield engine


def _of_kind(steps: list[StepInfo], kind: str) -> list[object]:
    return [s.result for s in steps if s.kind == kind and s.status == "completed"]


def _seen_problems(ledger: Path, run_id: str) -> list[str]:
    """A workflow observes a signal only after its step committed, so what one lifetime saw
    at a position no lifetime may contradict: one payload per position, one position per
    payload."""
    by_pos: dict[int, set[str]] = defaultdict(set)
    by_payload: dict[str, set[int]] = defaultdict(set)
    for e in kitm.notes(ledger, "SEEN"):
        if e.run == run_id:
            by_pos[e.n].add(e.label)
            by_payload[e.label].add(e.n)
    problems = [
        f"{run_id}: position {p} observed as {sorted(s)}" for p, s in by_pos.items() if len(s) > 1
    ]
    problems += [
        f"{run_id}: signal {x} observed at positions {sorted(s)}"
        for x, s in by_payload.items()
        if len(s) > 1
    ]
    return problems


async def _final_exit_problems(worker: kit.WorkerProcess) -> list[str]:
    """Wait for the last worker to finish; a problem (not an exception) if it does not, so
    the test still reports the store's state."""
    try:
        returncode = await kitm.exited(worker, FINAL_TIMEOUT_S)
    except AssertionError:  # exited() killed it
        return [f"the final worker did not finish in {FINAL_TIMEOUT_S}s:\n{worker.log_tail()}"]
    if returncode != 0:
        return [f"the final worker exited {returncode}:\n{worker.log_tail()}"]
    return []


async def _kill_and_restart(
    rng: random.Random,
    worker: kit.WorkerProcess,
    workers: list[kit.WorkerProcess],
    relaunch: Callable[[str], kit.WorkerProcess],
    ledger: Path,
    where: str,
) -> tuple[kit.WorkerProcess, int]:
    """``KILLS`` times: let the worker live a seeded random while, SIGKILL it, start the next.

    Stops early (returning fewer kills) only if a worker finished its work on its own.
    """
    kills = 0
    for k in range(1, KILLS + 1):
        await asyncio.sleep(rng.uniform(*KILL_DELAY_S))
        if not worker.kill():
            assert worker.proc.returncode == 0, (
                f"{where}: worker {worker.lifetime} died ({worker.proc.returncode}):\n"
                f"{worker.log_tail()}"
            )
            break
        kills += 1
        worker = relaunch(f"k{k:02d}")
        workers.append(worker)
        await kitm.ready(worker, ledger)
    return worker, kills


# --- 1. acknowledged signals ------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
async def test_every_acknowledged_signal_is_consumed_exactly_once_across_sigkills(
    tmp_path: Path, store: Path | str, seed: int
) -> None:
    """One sender per run (the test process) signals three runs continuously while the
    worker is SIGKILLed 6 times at seeded random moments and restarted; then ``stop``.

    Invariants: every run completes with exactly the payloads whose ``engine.signal``
    returned, in send order (nothing lost, nothing doubled, nothing reordered); its
    journal holds exactly one ``signal`` step per acknowledged payload (plus ``stop``)
    and one ``echo`` per payload; no signal stays buffered; no lifetime of the workflow
    ever observed a signal at a position where another lifetime observed a different
    one; the final worker exits 0 and no worker logged an error.
    """
    where = f"seed {seed} (rerun with PYWEFT_CRASH_SEEDS={seed})"
    db, ledger = store, tmp_path / "ledger.txt"
    runs = ["inbox-0", "inbox-1", "inbox-2"]
    rng = random.Random(seed)

    def relaunch(lifetime: str) -> kit.WorkerProcess:
        return kitm.launch(tmp_path, db, ledger, lifetime, workflow="inbox", runs=runs)

    workers = [relaunch("k00")]
    try:
        await kitm.ready(workers[0], ledger)
        async with _engine(db) as engine:
            acked: dict[str, list[str]] = {r: [] for r in runs}
            sending = True

            async def sender(run_id: str) -> None:
                pace = random.Random(f"{seed}/{run_id}")
                while sending:
                    payload = f"{run_id}/{len(acked[run_id]):04d}"
                    await engine.signal(run_id, "item", payload)
                    acked[run_id].append(payload)  # engine.signal returned: acknowledged
                    await asyncio.sleep(pace.uniform(0.0, 0.04))

            senders = [asyncio.create_task(sender(r)) for r in runs]
            try:
                worker, kills = await _kill_and_restart(
                    rng, workers[0], workers, relaunch, ledger, where
                )
            finally:
                sending = False
                await asyncio.gather(*senders)
            assert kills == KILLS, f"{where}: only {kills} kills landed"
            for r in runs:
                await engine.signal(r, "item", "stop")
            problems = await _final_exit_problems(worker)
            infos = {r: await engine.describe(r) for r in runs}
            steps = {r: (await engine.history(r)).steps for r in runs}
            leftover = await engine.storage.scan("sig:")
    finally:
        for w in workers:
            w.ensure_dead()

    for r in runs:
        if infos[r].status != "completed" or infos[r].result != acked[r]:
            got = infos[r].result if isinstance(infos[r].result, list) else []
            problems.append(
                f"{r}: {infos[r].status}, {len(got)} payloads for {len(acked[r])} acknowledged; "
                f"missing {sorted(set(acked[r]) - set(got))[:5]}, "
                f"extra/duplicated {[x for x in got if got.count(x) > 1 or x not in acked[r]][:5]}"
            )
        if _of_kind(steps[r], "signal") != [*acked[r], "stop"]:
            problems.append(f"{r}: the journal's signal steps differ from the acknowledged signals")
        if _of_kind(steps[r], "activity") != acked[r]:
            problems.append(f"{r}: the journal's echo steps differ from the acknowledged signals")
        problems += _seen_problems(ledger, r)
    if leftover:
        problems.append(f"signals still buffered: {[k for k, _ in leftover][:5]}")
    problems += kitm.log_problems(workers)
    assert not problems, f"{where}: {len(problems)} problem(s):\n" + "\n".join(problems)
    print(f"{where}: {KILLS} kills, {sum(map(len, acked.values()))} acknowledged signals")


# --- 2. a signal read by a step that did not commit ------------------------------------


@pytest.mark.parametrize("moment", ["before", "after"])
async def test_signal_consumed_at_a_sigkilled_commit_is_delivered_exactly_once(
    tmp_path: Path, store: Path | str, moment: str
) -> None:
    """The worker kills itself at the batch deleting the buffered signal (its consume
    commit): ``before`` SQLite applies it, or right ``after``.

    before: the store still holds the signal and no signal step, the workflow never
    observed it; after restart it is consumed (once). after: the store holds the step and
    not the signal; after restart it is replayed, not consumed again. Either way the run
    returns ``["first", "second"]`` and its journal has exactly one step per signal.
    """
    db, ledger = store, tmp_path / "ledger.txt"
    run = "pick"
    armed = kitm.launch(
        tmp_path,
        db,
        ledger,
        "armed",
        workflow="inbox",
        runs=[run],
        trigger=f"{moment}:delete:^sig:",
    )
    healed = None
    try:
        await kitm.ready(armed, ledger)
        async with _engine(db) as engine:
            await engine.signal(run, "item", "first")  # acknowledged: durably buffered
            assert await kitm.exited(armed, 20) == SIGKILLED, armed.log_tail()
            [kill] = kitm.notes(ledger, "KILL", "armed")
            assert kill.label == moment and kill.run.startswith("sig:pick:item:")
            buffered = [k for k, _ in await engine.storage.scan("sig:")]
            signals = _of_kind((await engine.history(run)).steps, "signal")
            if moment == "before":
                assert buffered == [kill.run], "the uncommitted consume must leave the signal"
                assert signals == []
            else:
                assert buffered == [] and signals == ["first"]
            assert kitm.notes(ledger, "SEEN", "armed") == [], "observed before its commit"

            await engine.signal(run, "item", "second")  # while no worker runs
            healed = kitm.launch(tmp_path, db, ledger, "healed", workflow="inbox", runs=[run])
            await kitm.ready(healed, ledger)
            await engine.signal(run, "item", "stop")
            assert await kitm.exited(healed, 30) == 0, healed.log_tail()
            assert await engine.result(run, timeout=5) == ["first", "second"]
            history = (await engine.history(run)).steps
            assert _of_kind(history, "signal") == ["first", "second", "stop"]
            assert _of_kind(history, "activity") == ["first", "second"]
            assert await engine.storage.scan("sig:") == []
    finally:
        armed.ensure_dead()
        if healed is not None:
            healed.ensure_dead()
    assert _seen_problems(ledger, run) == []
    assert kitm.log_problems([armed, healed]) == []


# --- 3. acknowledged updates -------------------------------------------------------------

N_UPDATES = 200  # per run, from the caller inside the worker
N_UPDATES_REMOTE = 70  # per run, from the test process (slower: answers are polled)


def _acks(ledger: Path, run_id: str) -> dict[str, set[str]]:
    """Index -> every answer an in-worker caller was given for it (``ACK index=answer``)."""
    answers: dict[str, set[str]] = defaultdict(set)
    for e in kitm.notes(ledger, "ACK"):
        if e.run == run_id:
            index, answer = e.label.split("=", 1)
            answers[index].add(answer)
    return answers


def _applied(events: list[HistoryEvent], name: str) -> int:
    """How many ``name`` updates the run's update log says a handler applied."""
    return sum(1 for e in events if e.kind == "update_applied" and e.detail.startswith(f"{name} ("))


@pytest.mark.parametrize("caller", ["in-worker", "test-process"])
@pytest.mark.parametrize("seed", SEEDS)
async def test_every_acknowledged_update_is_applied_exactly_once_across_sigkills(
    tmp_path: Path, store: Path | str, seed: int, caller: str
) -> None:
    """A caller sends ``add`` updates (200 per run from the worker, 70 from the test
    process, whose answers arrive by polling) one at a time, each with its own
    idempotency key, then ``finish``, while the worker is SIGKILLed 6 times at seeded
    random moments and restarted.

    ``in-worker``: the caller lives in the worker, dies with it and writes ``ACK``
    (fsynced) once it has an answer; each new lifetime resends the unacknowledged
    updates with the same keys. ``test-process``: the test process is the caller; its
    ``engine.update`` calls simply keep waiting across the worker's deaths.

    Invariants: every run completes with exactly ``p000, p001, ...`` in order (each update
    applied once, none lost); every answer a caller got for update ``i`` is ``{i+1}|p{i}``
    (one answer per update, and the state the caller was shown is the state that
    survived); the run's update log holds exactly one ``add`` per update and one ``finish``
    application; no request stays queued; the final worker exits 0 and no worker logged
    an error.
    """
    where = f"seed {seed}, caller {caller} (rerun with PYWEFT_CRASH_SEEDS={seed})"
    db, ledger = store, tmp_path / "ledger.txt"
    runs = ["cart-0", "cart-1"]
    rng = random.Random(seed)
    in_worker = caller == "in-worker"
    n = N_UPDATES if in_worker else N_UPDATES_REMOTE
    answers: dict[str, dict[str, set[str]]] = {r: defaultdict(set) for r in runs}

    def relaunch(lifetime: str) -> kit.WorkerProcess:
        return kitm.launch(
            tmp_path,
            db,
            ledger,
            lifetime,
            workflow="cart",
            runs=runs,
            updates=n if in_worker else 0,
            finish=in_worker,
        )

    async def call(engine: Engine, run_id: str) -> None:
        pace = random.Random(f"{seed}/{run_id}")
        for i in range(n):
            key = f"{run_id}/{i:03d}"
            answer = await engine.update(
                run_id, "add", f"p{i:03d}", idempotency_key=key, timeout=30
            )
            answers[run_id][f"{i:03d}"].add(answer)
            await asyncio.sleep(pace.uniform(0.0, 0.02))
        key = f"{run_id}/finish"
        answers[run_id]["finish"].add(await engine.update(run_id, "finish", idempotency_key=key))

    workers = [relaunch("k00")]
    try:
        await kitm.ready(workers[0], ledger)
        async with _engine(db) as engine:
            callers = [] if in_worker else [asyncio.create_task(call(engine, r)) for r in runs]
            try:
                worker, kills = await _kill_and_restart(
                    rng, workers[0], workers, relaunch, ledger, where
                )
                await asyncio.gather(*callers)
            finally:
                for task in callers:
                    task.cancel()
                await asyncio.gather(*callers, return_exceptions=True)
            assert kills >= 4, f"{where}: the workload ended after {kills} kills; make it longer"
            problems = await _final_exit_problems(worker)
            infos = {r: await engine.describe(r) for r in runs}
            events = {r: (await engine.history(r)).events for r in runs}
            queued = await engine.storage.scan("upd:")
    finally:
        for w in workers:
            w.ensure_dead()

    want_items = [f"p{i:03d}" for i in range(n)]
    want_answers = {f"{i:03d}": {f"{i + 1}|p{i:03d}"} for i in range(n)}
    want_answers["finish"] = {f"finished|{n}"}
    for r in runs:
        if infos[r].status != "completed" or infos[r].result != want_items:
            problems.append(f"{r}: {infos[r].status} with {infos[r].result!r}")
        got = _acks(ledger, r) if in_worker else answers[r]
        if got != want_answers:
            bad = {k: v for k, v in got.items() if want_answers.get(k) != v}
            missing = sorted(set(want_answers) - set(got))
            problems.append(
                f"{r}: answers differ: {dict(list(bad.items())[:5])}, none for {missing[:5]}"
            )
        if (_applied(events[r], "add"), _applied(events[r], "finish")) != (n, 1):
            problems.append(
                f"{r}: update log holds {_applied(events[r], 'add')} add and "
                f"{_applied(events[r], 'finish')} finish applications"
            )
    if queued:
        problems.append(f"update requests still queued: {[k for k, _ in queued][:5]}")
    problems += kitm.log_problems(workers)
    assert not problems, f"{where}: {len(problems)} problem(s):\n" + "\n".join(problems)
    print(f"{where}: {kills} kills, {n * len(runs)} acknowledged updates")


@pytest.mark.parametrize("moment", ["before", "after"])
async def test_update_sigkilled_at_its_apply_commit_is_applied_exactly_once(
    tmp_path: Path, store: Path | str, moment: str
) -> None:
    """The worker's caller sends ``add p000`` (idempotency key ``cart-k/000``); the worker
    kills itself at the batch that records the handler's application (a ``wf:...:u:``
    put, with the response and the request's deletion): ``before`` or ``after`` SQLite
    applies it.

    before: request queued, no response, nothing applied. after: response stored, one
    application, request gone. Then, with no worker running, the test process retries
    the same idempotency key and waits on ``update_result(update_id)``; a new worker
    recovers the run and its caller retries the key too. Asserted: all three get the
    one answer ``1|p000``; the run ends with ``["p000"]`` and one ``add`` application.
    """
    db, ledger = store, tmp_path / "ledger.txt"
    run, key = "cart-k", "cart-k/000"
    armed = kitm.launch(
        tmp_path,
        db,
        ledger,
        "armed",
        workflow="cart",
        runs=[run],
        updates=1,
        trigger=f"{moment}:put:^wf:cart-k:u:",
    )
    healed = None
    try:
        await kitm.ready(armed, ledger)
        assert await kitm.exited(armed, 20) == SIGKILLED, armed.log_tail()
        [kill] = kitm.notes(ledger, "KILL", "armed")
        assert kill.label == moment and kill.run.startswith("wf:cart-k:u:")
        assert _acks(ledger, run) == {}, "the caller cannot have had its answer"
        async with _engine(db) as engine:
            [(_, update_id_raw)] = await engine.storage.scan("upk:")
            update_id = update_id_raw.decode()
            queued = await engine.storage.scan("upd:")
            answered = await engine.storage.get(f"upr:{update_id}")
            applied = _applied((await engine.history(run)).events, "add")
            if moment == "before":
                assert (len(queued), answered, applied) == (1, None, 0)
            else:
                assert (queued, applied) == ([], 1) and answered is not None

            retry = asyncio.create_task(
                engine.update(run, "add", "p000", idempotency_key=key, timeout=30)
            )
            later = asyncio.create_task(engine.update_result(update_id, timeout=30))
            healed = kitm.launch(
                tmp_path,
                db,
                ledger,
                "healed",
                workflow="cart",
                runs=[run],
                updates=1,
                finish=True,
            )
            assert await kitm.exited(healed, 30) == 0, healed.log_tail()
            assert await retry == "1|p000"
            assert await later == "1|p000"
            assert await engine.update(run, "add", "p000", idempotency_key=key) == "1|p000"
            assert await engine.result(run, timeout=5) == ["p000"]
            assert _applied((await engine.history(run)).events, "add") == 1
            assert await engine.storage.scan("upd:") == []
    finally:
        armed.ensure_dead()
        if healed is not None:
            healed.ensure_dead()
    assert _acks(ledger, run) == {"000": {"1|p000"}, "finish": {"finished|1"}}
    assert kitm.log_problems([armed, healed]) == []


# --- 4. review decisions -----------------------------------------------------------------


@pytest.mark.parametrize("moment", ["before", "after", "worker-down"])
async def test_review_decision_survives_a_sigkill_before_the_workflow_records_it(
    tmp_path: Path, store: Path | str, moment: str
) -> None:
    """``submit_review`` returns (from the test process); then the worker dies: at the
    batch that records the decision as the run's step 1 (``before`` / ``after`` SQLite
    applies it), or it was already killed (``worker-down``) when the decision was sent.

    Asserted: the restarted worker completes the run with that decision (reviewer and
    feedback included); ``list_reviews(status=None)`` shows exactly one review for the run,
    decided as submitted: the restart did not ask again.
    """
    db, ledger = store, tmp_path / "ledger.txt"
    run = "rev-0"
    trigger = None if moment == "worker-down" else f"{moment}:put:^wf:rev-0:j:0000000001$"
    armed = kitm.launch(
        tmp_path, db, ledger, "armed", workflow="reviewed", runs=[run], trigger=trigger
    )
    healed = None
    try:
        await kitm.ready(armed, ledger)
        async with _engine(db) as engine:

            async def requested() -> bool:
                return bool(await engine.list_reviews(workflow_id=run))

            await eventually(requested, timeout=10, what="the review request")
            [review] = await engine.list_reviews(workflow_id=run)
            if moment == "worker-down":
                assert armed.kill()
            await engine.submit_review(
                review.review_id, "approved", reviewer="ann", feedback="ship-it"
            )  # acknowledged
            if moment != "worker-down":
                assert await kitm.exited(armed, 20) == SIGKILLED, armed.log_tail()
                [kill] = kitm.notes(ledger, "KILL", "armed")
                assert kill.label == moment
            [step] = (await engine.history(run)).steps
            assert (step.kind, step.status) == (
                "review",
                "completed" if moment == "after" else "open",
            )
            healed = kitm.launch(tmp_path, db, ledger, "healed", workflow="reviewed", runs=[run])

            async def healed_exited() -> bool:
                asked = await engine.list_reviews(status=None, workflow_id=run)
                assert len(asked) == 1, f"the restart asked again: {asked}"
                return healed is not None and healed.proc.poll() is not None

            await eventually(healed_exited, timeout=30, what="the restarted worker to finish")
            assert healed.proc.returncode == 0, healed.log_tail()
            assert await engine.result(run, timeout=5) == "approved|ann|ship-it"
            reviews = await engine.list_reviews(status=None, workflow_id=run)
            steps = (await engine.history(run)).steps
    finally:
        armed.ensure_dead()
        if healed is not None:
            healed.ensure_dead()
    assert [(r.review_id, r.status, r.reviewer, r.feedback) for r in reviews] == [
        (review.review_id, "approved", "ann", "ship-it")
    ], "the review was asked more than once or its decision changed"
    assert [(s.kind, s.status) for s in steps] == [
        ("review", "completed"),
        ("activity", "completed"),
    ]
    assert kitm.log_problems([armed, healed]) == []


# --- 5. cancel ---------------------------------------------------------------------------


@pytest.mark.parametrize("moment", ["worker-down", "worker-running", "at-delivery"])
async def test_acknowledged_cancel_survives_sigkill_and_restart(
    tmp_path: Path, store: Path | str, moment: str
) -> None:
    """A run parked on ``wait_for_signal``; the test process cancels it with its own
    ``Engine(recover=False)``: while the worker is down; while it runs (SIGKILL right after
    ``cancel`` returned); or while it runs, with the worker killing itself at the batch
    that would record the run as ``cancelled`` (``at-delivery``).

    Asserted: once ``cancel`` returned the store holds the request (``cancel_requested``);
    after the restart the run ends ``cancelled``, the worker's ``result()`` raises
    ``WorkflowCancelledError``, a later signal is refused with ``WorkflowTerminalError``,
    and no step was recorded.
    """
    db, ledger = store, tmp_path / "ledger.txt"
    run = "parked-0"
    trigger = "before:put:^ix:s:cancelled:" if moment == "at-delivery" else None
    first = kitm.launch(
        tmp_path, db, ledger, "first", workflow="parked", runs=[run], trigger=trigger
    )
    healed = None
    try:
        await kitm.ready(first, ledger)
        async with _engine(db) as engine:
            if moment == "worker-down":
                assert first.kill()
            await engine.cancel(run)  # acknowledged
            assert (await engine.describe(run)).cancel_requested
            if moment == "worker-running":
                assert first.kill(), f"worker exited early:\n{first.log_tail()}"
            elif moment == "at-delivery":
                assert await kitm.exited(first, 20) == SIGKILLED, first.log_tail()
                [kill] = kitm.notes(ledger, "KILL", "first")
                assert kill.run.startswith("ix:s:cancelled:")
                assert (await engine.describe(run)).status == "running", "the kill came first"
            healed = kitm.launch(tmp_path, db, ledger, "healed", workflow="parked", runs=[run])
            assert await kitm.exited(healed, 30) == 0, healed.log_tail()
            info = await engine.describe(run)
            with pytest.raises(WorkflowTerminalError):
                await engine.signal(run, "go")
            steps = (await engine.history(run)).steps
    finally:
        first.ensure_dead()
        if healed is not None:
            healed.ensure_dead()
    assert (info.status, info.cancel_requested) == ("cancelled", True)
    assert [e.label for e in kitm.notes(ledger, "OUT", "healed")] == ["WorkflowCancelledError"]
    assert steps == []
    assert kitm.log_problems([first, healed]) == []


async def test_cancel_from_another_process_stops_the_running_workflow(
    tmp_path: Path, store: Path | str
) -> None:
    """A worker runs 200 short activities (BEGIN/END in the ledger); the test process
    cancels the run. Asserted: the run ends ``cancelled`` without a kill, and no activity
    begins and no step commits later than 0.5 s (10 poll intervals) after ``cancel``
    returned. (Before commit 216d0b1 the worker never noticed: it ran every activity.)
    """
    db, ledger = store, tmp_path / "ledger.txt"
    run = "loop-0"
    worker = kitm.launch(tmp_path, db, ledger, "w", workflow="looper", runs=[run])
    try:
        await kitm.ready(worker, ledger)
        async with _engine(db) as engine:

            async def busy() -> bool:
                return len((await engine.history(run)).steps) >= 3

            await eventually(busy, timeout=10, what="the run to be busy")
            await engine.cancel(run)
            cancelled_at = time.time()  # acknowledged
            assert await kitm.exited(worker, 20) == 0, worker.log_tail()
            info = await engine.describe(run)
            late = [
                s.step
                for s in (await engine.history(run)).steps
                if s.finished_at is not None and s.finished_at.timestamp() > cancelled_at + 0.5
            ]
    finally:
        worker.ensure_dead()
    assert info.status == "cancelled"
    assert [e.label for e in kitm.notes(ledger, "OUT", "w")] == ["WorkflowCancelledError"]
    begun_late = [e.token for e in kitm.notes(ledger, "BEGIN") if e.at > cancelled_at + 0.5]
    assert not late, f"steps {late[:5]} were committed after the acknowledged cancel"
    assert not begun_late, f"activities {begun_late[:5]} began after the acknowledged cancel"


# --- 6. concurrent duplicate senders -----------------------------------------------------

N_SENDER_PROCS, N_CORO = 4, 5


def _overlapping_senders(ledger: Path) -> int:
    """How many sender processes were in flight while another one was."""
    spans: dict[str, list[float]] = defaultdict(list)
    for e in kitm.notes(ledger, "SEND") + kitm.notes(ledger, "ACK"):
        if e.lifetime.startswith("s"):
            spans[e.lifetime].append(e.at)
    windows = [(min(t), max(t)) for t in spans.values()]
    return sum(
        any(a0 < b1 and b0 < a1 for j, (b0, b1) in enumerate(windows) if j != i)
        for i, (a0, a1) in enumerate(windows)
    )


def _run_senders(
    tmp: Path, db: Path | str, ledger: Path, kind: str, run: str, name: str, key: str
) -> list[kit.WorkerProcess]:
    go = tmp / f"go-{kind}"
    senders = [
        kitm.launch_sender(
            tmp,
            db,
            ledger,
            f"s{p}",
            kind=kind,
            workflow_id=run,
            name=name,
            key=key,
            coroutines=N_CORO,
            go=go,
        )
        for p in range(N_SENDER_PROCS)
    ]
    for s in senders:  # all started (imports done, engine open): now they fire together
        kit.wait_ready(s, ledger, timeout=60)
    go.touch()
    return senders


async def test_twenty_concurrent_senders_of_one_signal_id_deliver_it_once(
    tmp_path: Path, store: Path | str
) -> None:
    """4 sender processes x 5 coroutines send ``item`` with the same ``signal_id`` at the
    same instant to a run the worker drives, then the test sends ``stop``.

    Asserted: all 20 calls return; the workflow observed exactly one of the 20 payloads,
    once; one acceptance marker exists; the windows of the sender processes overlapped.
    """
    db, ledger = store, tmp_path / "ledger.txt"
    run = "dedupe-sig"
    worker = kitm.launch(tmp_path, db, ledger, "w", workflow="inbox", runs=[run])
    senders: list[kit.WorkerProcess] = []
    try:
        await kitm.ready(worker, ledger)
        senders = _run_senders(tmp_path, db, ledger, "signal", run, "item", "once")
        for s in senders:
            assert await kitm.exited(s, 30) == 0, s.log_tail()
        async with _engine(db) as engine:
            await engine.signal(run, "item", "stop")
            assert await kitm.exited(worker, 30) == 0, worker.log_tail()
            result = await engine.result(run, timeout=5)
            markers = await engine.storage.scan("sigres:")
    finally:
        for p in [worker, *senders]:
            p.ensure_dead()
    sent = {e.label for e in kitm.notes(ledger, "SEND")}
    assert len(sent) == N_SENDER_PROCS * N_CORO
    assert len(kitm.notes(ledger, "ACK")) == N_SENDER_PROCS * N_CORO, "a send did not return"
    assert len(result) == 1 and result[0] in sent, result
    assert len(markers) == 1
    assert _overlapping_senders(ledger) >= 2, "the sender processes never ran concurrently"
    assert kitm.log_problems([worker, *senders]) == []


async def test_twenty_concurrent_update_callers_with_one_key_get_one_answer(
    tmp_path: Path, store: Path | str
) -> None:
    """4 sender processes x 5 coroutines call ``update("add", own payload)`` with one
    idempotency key at the same instant, while the worker drives the run (a call is resent
    with the same key on ``UpdateTimeoutError``).

    Asserted: all 20 calls return the same answer ``1|<one payload>``; the handler was
    applied once (one ``add`` application; the run returns that one payload).
    """
    db, ledger = store, tmp_path / "ledger.txt"
    run = "dedupe-upd"
    worker = kitm.launch(tmp_path, db, ledger, "w", workflow="cart", runs=[run])
    senders: list[kit.WorkerProcess] = []
    try:
        await kitm.ready(worker, ledger)
        senders = _run_senders(tmp_path, db, ledger, "update", run, "add", "once")
        for s in senders:
            assert await kitm.exited(s, 40) == 0, s.log_tail()
        async with _engine(db) as engine:
            await engine.signal(run, "stop")
            assert await kitm.exited(worker, 30) == 0, worker.log_tail()
            result = await engine.result(run, timeout=5)
            applied = _applied((await engine.history(run)).events, "add")
    finally:
        for p in [worker, *senders]:
            p.ensure_dead()
    answers = [e.label for e in kitm.notes(ledger, "ACK") if e.lifetime.startswith("s")]
    sent = {e.label for e in kitm.notes(ledger, "SEND")}
    assert len(answers) == N_SENDER_PROCS * N_CORO, "a caller got no answer"
    assert len(set(answers)) == 1, f"callers got different answers: {sorted(set(answers))}"
    assert len(result) == 1 and result[0] in sent and answers[0] == f"1|{result[0]}"
    assert applied == 1
    assert _overlapping_senders(ledger) >= 2, "the sender processes never ran concurrently"
    assert kitm.log_problems([worker, *senders]) == []


async def test_update_from_another_process_is_applied_by_the_running_worker(
    tmp_path: Path, store: Path | str
) -> None:
    """The test process updates a run a live worker drives. Asserted: the answer comes
    within 3 s (60 poll intervals) and the run's result includes the update once. (Before
    commit 216d0b1 a running worker never applied it: the caller got ``UpdateTimeoutError``
    and the run could finish with the request still queued.)"""
    db, ledger = store, tmp_path / "ledger.txt"
    run = "cart-x"
    worker = kitm.launch(tmp_path, db, ledger, "w", workflow="cart", runs=[run])
    try:
        await kitm.ready(worker, ledger)
        async with _engine(db) as engine:
            await asyncio.sleep(0.2)  # the run is parked between its steps
            assert await engine.update(run, "add", "x", timeout=3) == "1|x"
            await engine.signal(run, "stop")
            assert await kitm.exited(worker, 20) == 0, worker.log_tail()
            assert await engine.result(run, timeout=5) == ["x"]
            assert await engine.storage.scan("upd:") == []
    finally:
        worker.ensure_dead()
