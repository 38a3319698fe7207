"""One engine in its own process, for the ownership tests on PostgreSQL.

Usage: ``python ownership_worker.py CONFIG_JSON`` (a
:class:`support.crashkit_ownership.WorkerConfig`). The ledger lifetime comes
from ``$CRASHKIT_LIFETIME``.

Writes ``START`` (imports done), ``OPENING``, opens the engine (a ``lease``
engine waits here for the store lease), writes ``OPEN``/``ACQUIRED``/``HEALTH``/
``STORE``, optionally waits for ``CONTROL/go``, starts its share of the runs
with ``on_conflict="use_existing"`` (``STARTED``), then waits for one of:

* every run of the workload ``completed`` (``ALLDONE``); with ``hold`` it then
  waits for a stop request and records the store's view (``STORE``) before it
  shuts down; exits 0;
* a stop request (SIGTERM or ``CONTROL/stop``): ``TERM``, awaits
  ``engine.shutdown()`` (which releases the lease or the claims), ``STOPPED``,
  exits 10;
* a ``LeaseLostWarning`` (``DEPOSED``): waits until the engine has torn itself
  down (``CLOSED``) and exits 20.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`

from pyweft import Engine, LeaseLostWarning, WorkflowContext, activity, workflow
from support import crashkit as kit
from support import crashkit_ownership as own

_ledger: own.OwnershipLedger | None = None
START_CONCURRENCY = 10  # starts in flight at once: the whole share starts within ~a second


def ledger() -> own.OwnershipLedger:
    assert _ledger is not None
    return _ledger


@activity(name=own.ACTIVITY)
async def owned_step(run_id: str, label: str, x: int, work_s: float) -> dict[str, Any]:
    n = ledger().begin(run_id, label)
    try:
        await asyncio.sleep(work_s)
    except asyncio.CancelledError:
        ledger().cancel(run_id, label, n)
        raise
    ledger().end(run_id, label, n)
    return {"v": kit.twist_value(x), "by": ledger().lifetime, "n": n, "pid": os.getpid()}


@workflow(name="owned")
async def owned(ctx: WorkflowContext, run_id: str, steps: int, work_s: float) -> int:
    x = kit.origin(run_id)
    for phase in range(1, steps + 1):
        out = await ctx.run(owned_step, run_id, kit.label(phase), x, work_s)
        x = int(out["v"])
        # Reached only once the step is committed: the proof the ledger rule uses.
        ledger().mark(run_id, phase)
    return x


class _ClaimLost(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if "lost its claim" in record.getMessage() and isinstance(args, tuple) and len(args) > 1:
            ledger().note("CLAIMLOST", str(args[1]))  # (engine id, workflow id)


async def main(cfg: own.WorkerConfig) -> int:
    global _ledger
    lifetime = os.environ["CRASHKIT_LIFETIME"]
    _ledger = own.OwnershipLedger(cfg.ledger, lifetime)
    control = Path(cfg.control)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    deposed = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR2, _dump_tasks)  # `kill -USR2 PID`: every task's stack

    shown = warnings.showwarning

    def showwarning(message: Any, category: Any, *args: Any, **kw: Any) -> None:
        if issubclass(category, LeaseLostWarning) and not deposed.is_set():
            ledger().note("DEPOSED")
            deposed.set()
        shown(message, category, *args, **kw)

    warnings.showwarning = showwarning
    warnings.simplefilter("always", LeaseLostWarning)
    logging.getLogger("pyweft.claims").addHandler(_ClaimLost())

    ledger().start()
    engine = Engine(
        cfg.url,
        workflows=[owned],
        ownership=cfg.ownership,
        # One engine id per worker: these tests stand for engines on separate machines,
        # so none may take over another's claims before they expire.
        engine_id=f"worker-{lifetime}",
        poll_interval=cfg.poll_interval,
        lease_ttl=cfg.lease_ttl,
        lease_renew_interval=cfg.lease_renew_interval,
        lease_wait_timeout=cfg.lease_wait_timeout,
        claim_ttl=cfg.claim_ttl,
        claim_renew_interval=cfg.claim_renew_interval,
    )
    if os.environ.get("OWNERSHIP_TRACE") and engine._core.claims is not None:
        _trace_claim_cycle(engine)
    ledger().note("OPENING")
    await engine.open()
    try:
        health = engine.lease_health()
        ledger().note("OPEN", engine.instance_id, "-", health.epoch or 0)
        if health.state != "no-lease":
            held = f"{health.held_since:.6f}" if health.held_since is not None else "-"
            ledger().note("ACQUIRED", engine.instance_id, held, health.epoch or 0)
            ledger().note("HEALTH", health.state, health.holder_id or "-", health.epoch or 0)
        await note_store(engine)
        while cfg.wait_go:
            if (control / "go").exists() or stop.is_set():
                break
            await asyncio.sleep(0.01)
        for chunk in range(0, len(cfg.start), START_CONCURRENCY):
            await asyncio.gather(
                *(
                    engine.start(
                        owned,
                        own.run_id(i),
                        cfg.steps,
                        cfg.work_s,
                        id=own.run_id(i),
                        on_conflict="use_existing",
                    )
                    for i in cfg.start[chunk : chunk + START_CONCURRENCY]
                )
            )
        ledger().note("STARTED", "-", "-", len(cfg.start))

        async def stop_requested() -> None:
            while True:  # SIGTERM sets `stop`; the test may also touch CONTROL/stop
                if stop.is_set() or (control / "stop").exists():
                    return
                await asyncio.sleep(0.02)

        waits = {
            "done": asyncio.create_task(all_completed(engine, cfg.total)),
            "stop": asyncio.create_task(stop_requested()),
            "deposed": asyncio.create_task(deposed.wait()),
        }
        await asyncio.wait(waits.values(), return_when=asyncio.FIRST_COMPLETED)
        if deposed.is_set():
            # The engine shuts itself down on a later loop turn. Wait for that teardown
            # to *finish*: engine.shutdown() returns at once while another shutdown is
            # under way (see test_ownership_processes.py, the xfail test), and exiting
            # mid-teardown leaves the PostgreSQL pool open, which can hang the process.
            await _self_shutdown_finished(engine)
            ledger().note("CLOSED")
            code = own.EXIT_DEPOSED
        elif waits["done"].done() and waits["done"].exception() is None:
            ledger().note("ALLDONE")
            if cfg.hold:
                await stop_requested()
                await note_store(engine)
            code = own.EXIT_DONE
        else:
            ledger().note("TERM")
            code = own.EXIT_STOPPED
        for task in waits.values():
            task.cancel()
        await asyncio.gather(*waits.values(), return_exceptions=True)
        await engine.shutdown()
        if code == own.EXIT_STOPPED:
            ledger().note("STOPPED")
        return code
    finally:
        await engine.shutdown()


async def _self_shutdown_finished(engine: Engine) -> None:
    while True:
        running = [
            t
            for t in asyncio.all_tasks()
            if getattr(t.get_coro(), "__qualname__", "") == "Engine.shutdown"
        ]
        if engine._core.state == "closed" and not running:  # test-only peek
            return
        await asyncio.sleep(0.01)


def _trace_claim_cycle(engine: Engine) -> None:
    """Diagnostics (``OWNERSHIP_TRACE=1``): log how long each renewal pass and reclaim
    scan takes, and how many claims the renewal pass covered."""
    import time

    claims, core = engine._core.claims, engine._core
    assert claims is not None
    renew_all, reclaim = claims._renew_all, core.reclaim

    async def timed_renew() -> None:
        t0, n = time.perf_counter(), len(claims.claims)
        await renew_all()
        logging.getLogger("trace").warning(
            "renew pass: %d claims in %.3fs", n, time.perf_counter() - t0
        )

    async def timed_reclaim(undrivable: list[str] | None = None) -> int:
        t0 = time.perf_counter()
        taken = await reclaim(undrivable)
        logging.getLogger("trace").warning(
            "reclaim scan: took %d in %.3fs", taken, time.perf_counter() - t0
        )
        return taken

    acquire_many = claims.acquire_many

    async def noted_acquire_many(found: Any) -> list[str]:
        taken = await acquire_many(found)
        for workflow_id in taken:  # the chaos test's timeline shows who took what, when
            ledger().note("TOOK", workflow_id)
        return taken

    acquire = claims.acquire

    async def noted_acquire(workflow_id: str) -> bool:
        taken = await acquire(workflow_id)
        if taken:
            ledger().note("TOOK", workflow_id)
        return taken

    claims._renew_all = timed_renew  # type: ignore[method-assign]
    claims.acquire_many = noted_acquire_many  # type: ignore[method-assign]
    claims.acquire = noted_acquire  # type: ignore[method-assign]
    core.reclaim = timed_reclaim  # type: ignore[method-assign]


def _dump_tasks() -> None:
    for task in asyncio.all_tasks():
        print(f"--- {task!r}", file=sys.stderr)
        task.print_stack(file=sys.stderr)
    sys.stderr.flush()


async def note_store(engine: Engine) -> None:
    store = await engine.store_ownership()
    ledger().note(
        "STORE", store.lease_holder or "-", store.mode or "-", int(store.lease_epoch or 0)
    )


async def all_completed(engine: Engine, total: int) -> None:
    """Return once the store shows every run of the workload completed."""
    while True:
        groups = {g.key: g.count for g in await engine.aggregate(group_by="status")}
        if groups.get("completed", 0) >= total:
            return
        await asyncio.sleep(0.2)


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID` dumps every thread's stack
    logging.basicConfig(
        level=logging.WARNING,
        format="%(created).6f %(levelname)s %(name)s %(message)s",
    )
    config = own.WorkerConfig.from_json(sys.argv[1])
    sys.exit(asyncio.run(main(config)))
