"""Soak: every kind of workflow through thousands of injected storage faults.

One engine drives many runs (see ``support/faultsoak.py``) on a real store
wrapped in :class:`pyweft.testing.FaultyStorage`: a fraction of reads and
writes fail, some writes are applied and then reported failed ("outcome
unknown"), some calls are delayed. Clients start runs and send signals,
updates and review decisions through the same faults, retrying with the same
ids when a call fails. Then the faults stop and the test checks:

* every acknowledged start, signal, update and review decision took effect
  (each run's result reflects them, exactly once and in order);
* every run completes once, with the right result, on the engine that lived
  through the faults (a run left stranded there is a failure; the test then
  restarts the engine only to learn what else is wrong);
* no completed step ran again: the journal names the execution whose outcome
  it committed, and the ledger shows no execution of that step began after it;
* no refund ran: an engine failure never reached workflow code as an ordinary
  exception.

Seed: ``PYWEFT_SOAK_SEED`` (printed). Size: ``PYWEFT_SOAK_RUNS`` runs of each
kind. Fault rate: ``PYWEFT_SOAK_RATE`` per call (``0`` for a control run that
checks the soak itself). Run with ``python3 tasks.py test tests/soak -m slow``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pyweft import Engine, Storage
from pyweft.errors import (
    EngineClosedError,
    PyweftError,
    ResultTimeoutError,
    ReviewAlreadyDecidedError,
    StorageError,
    UpdateTimeoutError,
)
from pyweft.storage import open_storage
from pyweft.testing import FaultyStorage, InjectedFaultError
from support import crashkit as kit
from support import faultsoak as fs
from support.backends import postgres_schema, with_schema

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SEED = fs.env_int("PYWEFT_SOAK_SEED", 20240917)
RUNS_PER_KIND = fs.env_int("PYWEFT_SOAK_RUNS", 30)
FAULT_WINDOW_S = fs.env_float("PYWEFT_SOAK_FAULT_WINDOW_S", 60.0)  # faults stop after this
SETTLE_S = fs.env_float("PYWEFT_SOAK_SETTLE_S", 60.0)  # then every run must finish within
RATE = fs.env_float("PYWEFT_SOAK_RATE", 0.08)  # 0 gives a fault-free control run
RATES = {
    "read_failure_rate": RATE,
    "write_failure_rate": RATE,
    "lost_reply_rate": RATE * 0.8,
    "delay_rate": RATE,
    "max_delay_s": 0.005,
}
CONCURRENT_CLIENTS = 24
T = TypeVar("T")
# Errors a client may meet while faults are on; it retries the same call with the same ids.
TRANSIENT = (StorageError, UpdateTimeoutError, EngineClosedError)


@dataclass
class Soak:
    store: FaultyStorage
    engine: Engine
    problems: list[str] = field(default_factory=list)
    client_retries: int = 0
    acknowledged: int = 0


@contextlib.contextmanager
def backend_url(name: str, tmp_path: Path) -> Iterator[str]:
    if name == "sqlite":
        yield f"sqlite:///{tmp_path / 'soak.db'}"
        return
    with postgres_schema() as (url, schema):
        yield with_schema(url, schema)


def open_engine(store: Storage) -> Engine:
    return Engine(
        store,
        workflows=fs.WORKFLOWS,
        activities=fs.ACTIVITIES,
        poll_interval=0.05,
        activity_threads=8,
    )


async def call(soak: Soak, fn: Callable[[], Awaitable[T]], *, acknowledges: bool = True) -> T:
    """``fn()`` until it succeeds; the call is resent with the same ids after a fault."""
    while True:
        try:
            result = await fn()
        except TRANSIENT:
            soak.client_retries += 1
            await asyncio.sleep(0.01)
            continue
        soak.acknowledged += acknowledges
        return result


async def drive(soak: Soak, run: str, gate: asyncio.Semaphore) -> None:
    """What a client does with one run: start it, and message it if it waits for that."""
    async with gate:
        wf, args = fs.start_args(run, SEED)
        await call(
            soak,
            lambda: soak.engine.start(wf, *args, id=run, on_conflict="use_existing"),
        )
        if not run.startswith("messages-"):
            return
        for i in range(fs.N_SIGNALS):
            await call(
                soak,
                lambda i=i: soak.engine.signal(run, "item", i, signal_id=f"{run}-s{i}"),
            )
        for i in range(fs.N_UPDATES):
            key = f"{run}-u{i}"
            answer = await call(
                soak,
                lambda key=key: soak.engine.update(
                    run, "add", {"key": key}, idempotency_key=key, timeout=2.0
                ),
            )
            if answer != i + 1:
                soak.problems.append(f"{run}: update {key} answered {answer!r}, not {i + 1}")
        await decide_review(soak, run)
        closed = await call(
            soak,
            lambda: soak.engine.update(run, "close", idempotency_key=f"{run}-close", timeout=2.0),
        )
        if closed != f"closed {run}":
            soak.problems.append(f"{run}: close answered {closed!r}")


async def decide_review(soak: Soak, run: str) -> None:
    lost_reply = False
    while True:
        pending = await call(
            soak, lambda: soak.engine.list_reviews(workflow_id=run), acknowledges=False
        )
        if not pending:
            if lost_reply:  # our decision landed although its reply was lost: done
                decided = await call(
                    soak,
                    lambda: soak.engine.list_reviews(workflow_id=run, status=None),
                    acknowledges=False,
                )
                if any(r.status == "approved" and r.reviewer == "soak" for r in decided):
                    soak.acknowledged += 1
                    return
            await asyncio.sleep(0.02)
            continue
        try:
            await soak.engine.submit_review(pending[0].review_id, "approved", reviewer="soak")
        except InjectedFaultError as exc:
            lost_reply = lost_reply or exc.outcome_unknown
            soak.client_retries += 1
            continue
        except ReviewAlreadyDecidedError:
            if not lost_reply:
                soak.problems.append(f"{run}: review decided by someone else")
        except TRANSIENT:
            soak.client_retries += 1
            continue
        soak.acknowledged += 1
        return


async def finished(soak: Soak, run: str, deadline: float) -> bool:
    """Whether ``run`` has ended by ``deadline`` (a store fault while asking is retried)."""
    for attempt in range(100):
        try:
            await soak.engine.get_handle(run).result(timeout=max(0.05, deadline - time.monotonic()))
        except ResultTimeoutError:
            return False
        except (StorageError, EngineClosedError):
            if attempt and time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
            continue
        except PyweftError:
            return True  # ended otherwise (failed...); its status is checked later
        return True
    return False


async def where_it_stands(engine: Engine, run: str) -> str:
    """What a stuck run looks like, for the failure message."""
    history = await engine.history(run)
    steps = ", ".join(f"{s.step}:{s.kind}:{s.name}:{s.status}" for s in history.steps[-6:])
    from pyweft.engine.replay import keys

    requests = [k for k, _ in await engine.storage.scan(keys.update_prefix(run))]
    answers = [k for k, _ in await engine.storage.scan(f"upk:{keys.enc(run)}:")]
    return (
        f"driven here: {engine.is_running_here(run)}, steps [{steps}], "
        f"update requests waiting {requests}, idempotency keys {answers}, "
        f"engine stats: {engine.stats()}"
    )


async def settle(
    soak: Soak, clients: asyncio.Future[Any], runs: list[str], within: float
) -> set[str]:
    """Wait up to ``within`` seconds for the clients and every run; the runs not finished."""
    deadline = time.monotonic() + within
    await asyncio.wait({clients}, timeout=within)
    return {run for run in runs if not await finished(soak, run, deadline)}


async def verify_runs(soak: Soak, runs: list[str]) -> tuple[dict[str, int], set[str]]:
    """Check each run's status and result; collect the executions its journal holds."""
    committed: dict[str, int] = {}
    must_hold: set[str] = set()
    engine = soak.engine

    def record(tok: str, n: int, where: str) -> None:
        if committed.setdefault(tok, n) != n:
            soak.problems.append(
                f"{tok}: {where} holds execution #{n}, elsewhere #{committed[tok]}"
            )

    for run in runs:
        want, tokens, kids = fs.expected(run, SEED)
        must_hold.update(tokens)
        for wid in (run, *kids):
            info = await engine.describe(wid)
            if info.status != "completed":
                error = f" ({info.error.type}: {info.error.message})" if info.error else ""
                soak.problems.append(f"{wid}: ended {info.status}{error}, not completed")
                continue
            history = await engine.history(wid)
            finals = [e for e in history.events if e.kind == "completed"]
            if len(finals) != 1:
                soak.problems.append(f"{wid}: completed {len(finals)} times in its history")
            for step in history.steps:
                if step.kind == "activity" and step.status == "completed":
                    for tok, n in fs.recorded_executions(step.result):
                        record(tok, n, f"{wid}'s journal")
            for tok, n in fs.recorded_executions(info.result):
                record(tok, n, f"{wid}'s result")
        info = await engine.describe(run)
        if info.status == "completed":
            got = fs.comparable_result(run, info.result)
            if got != want:
                soak.problems.append(f"{run}: result {got!r}, expected {want!r}")
    return committed, must_hold


@pytest.fixture(params=["sqlite", "postgres"])
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_every_kind_of_workflow_survives_thousands_of_storage_faults(
    backend_name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL, logger="pyweft")  # thousands of expected warnings
    runs = fs.runs_for(RUNS_PER_KIND)
    ledger_path = tmp_path / "ledger.txt"
    fs.use_ledger(fs.SoakLedger(ledger_path, "soak"))
    with backend_url(backend_name, tmp_path) as url:
        inner = open_storage(url)
        store = FaultyStorage(inner, seed=SEED)
        soak = Soak(store, open_engine(store))
        await soak.engine.__aenter__()
        try:
            started = time.monotonic()
            store.configure(**RATES)
            gate = asyncio.Semaphore(CONCURRENT_CLIENTS)
            clients = asyncio.ensure_future(
                asyncio.gather(*(drive(soak, run, gate) for run in runs))
            )
            # Faults stay on until every client was answered and every run finished,
            # or for FAULT_WINDOW_S at most.
            stranded = await settle(soak, clients, runs, FAULT_WINDOW_S)
            faulted_s = time.monotonic() - started
            store.heal()
            stranded = await settle(soak, clients, runs, SETTLE_S) if stranded else stranded
            for run in sorted(stranded):
                info = await soak.engine.describe(run)
                soak.problems.append(
                    f"{run}: still {info.status} {SETTLE_S:.0f}s after the faults stopped, on "
                    "the engine that met them (a stranded run is not re-driven); "
                    + await where_it_stands(soak.engine, run)
                )
            restarted = False
            if stranded or not clients.done():
                # Only to learn what else is wrong: a fresh engine recovers what is left.
                restarted = True
                await asyncio.wait_for(soak.engine.__aexit__(None, None, None), 30)
                soak.engine = open_engine(store)
                await soak.engine.__aenter__()
                await settle(soak, clients, runs, SETTLE_S)
            if not clients.done():
                soak.problems.append("some clients were never answered, even after a restart")
                clients.cancel()
            elif clients.exception() is not None:
                soak.problems.append(f"a client failed: {clients.exception()!r}")
            committed, must_hold = await verify_runs(soak, runs)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(soak.engine.__aexit__(None, None, None), 30)
            await inner.close()
            fs.use_ledger(None)
    stats = fs.check_ledger(kit.read_ledger(ledger_path), committed, must_hold)
    counts = store.counts
    line = (
        f"fault soak ({backend_name}, seed {SEED}): {counts.errors} faults injected "
        f"({counts.read_failures} failed reads, {counts.write_failures} failed writes, "
        f"{counts.lost_replies} lost replies; plus {counts.delays} delays) over "
        f"{counts.reads} reads and {counts.writes} writes in {faulted_s:.1f}s; "
        f"{len(runs)} runs, {stats.executions} activity executions "
        f"({stats.retries} planned failures, {stats.reruns_uncommitted} re-runs of "
        f"uncommitted steps, {stats.interrupted} interrupted); {soak.acknowledged} "
        f"starts/signals/updates/decisions acknowledged after {soak.client_retries} retries; "
        f"{'engine restarted; ' if restarted else ''}"
        f"{len(soak.problems) + len(stats.problems)} problems"
    )
    print(line)
    fs.SUMMARY.append(line)
    problems = soak.problems + stats.problems
    assert not problems, f"{line}\n" + "\n".join(problems[:60])
