"""Worker and sender processes for the messaging SIGKILL tests.

``python messages_worker.py serve DB LEDGER LIFETIME WORKFLOW RUNS [options]``
    Opens an engine (``poll_interval=0.05``, recovering what a killed worker
    left running) on the SQLite file ``DB`` through :class:`KillSwitchStorage`,
    starts each run in the comma-separated ``RUNS`` with
    ``on_conflict="use_existing"``, writes ``START`` and waits until every run
    has ended, writing ``OUT`` for each and then ``DONE``. Options:

    ``--trigger WHEN:OP:REGEX``  SIGKILL this process at the first batch holding
        an ``OP`` (``put``/``delete``) whose key matches ``REGEX``: ``before`` it
        reaches SQLite or right ``after`` SQLite committed it.
    ``--updates N`` (``cart`` only)  an in-process caller sends updates
        ``add p000`` ... with idempotency keys ``RUN/000`` ..., one at a time,
        writing ``ACK`` after each answer; a later lifetime resends the
        unacknowledged ones with the same keys.  ``--finish`` then sends the
        ``finish`` update, which ends the run.

``python messages_worker.py send DB LEDGER LIFETIME KIND WORKFLOW_ID NAME KEY --coroutines C
--go FILE``
    Opens a client engine, writes ``START``, waits until ``FILE`` exists (the test
    creates it once every sender has started, so all of them fire together however
    slowly each process came up), then ``C`` coroutines each call ``engine.signal`` (KIND
    ``signal``, ``signal_id=KEY``) or ``engine.update`` (KIND ``update``,
    ``idempotency_key=KEY``, resent on ``UpdateTimeoutError``) with payload
    ``LIFETIME-i``; ``SEND`` before the call, ``ACK`` once it returned.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import re
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`

from pyweft import (
    Engine,
    SQLiteStorage,
    UpdateTimeoutError,
    WaitTimeoutError,
    WorkflowContext,
    activity,
    workflow,
)
from pyweft.storage import Delete, Expect, Put, Storage, StorageCapabilities, open_storage
from support import crashkit_messages as kitm

_ledger: kitm.MessageLedger | None = None


def ledger() -> kitm.MessageLedger:
    assert _ledger is not None
    return _ledger


# --- the storage kill switch -----------------------------------------------------------


class KillSwitchStorage:
    """A real store (SQLite or PostgreSQL) that SIGKILLs its own process at one chosen batch.

    Nothing in the engine is patched: the engine gets this object as its
    storage and every call is delegated unchanged; only the moment of death
    is chosen, right before or right after the matching batch is committed.
    """

    def __init__(self, inner: Storage, trigger: str | None) -> None:
        self._inner = inner
        self._when: str | None = None
        if trigger is not None:
            self._when, op, pattern = trigger.split(":", 2)
            assert self._when in ("before", "after") and op in ("put", "delete"), trigger
            self._op: type[Put] | type[Delete] = Put if op == "put" else Delete
            self._pattern = re.compile(pattern)

    @property
    def capabilities(self) -> StorageCapabilities:
        return self._inner.capabilities

    async def get(self, key: str) -> bytes | None:
        return await self._inner.get(key)

    async def scan(
        self,
        prefix: str,
        *,
        start: str | None = None,
        end: str | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> list[tuple[str, bytes]]:
        return await self._inner.scan(prefix, start=start, end=end, limit=limit, reverse=reverse)

    async def batch(self, ops: Sequence[Put | Delete]) -> None:
        self._maybe_die("before", ops)
        await self._inner.batch(ops)
        self._maybe_die("after", ops)

    async def conditional_batch(
        self, conditions: Sequence[Expect], ops: Sequence[Put | Delete]
    ) -> bool:
        self._maybe_die("before", ops)
        applied = await self._inner.conditional_batch(conditions, ops)
        if applied:
            self._maybe_die("after", ops)
        return applied

    async def close(self) -> None:
        await self._inner.close()

    def _maybe_die(self, moment: str, ops: Sequence[Put | Delete]) -> None:
        if moment != self._when:
            return
        for op in ops:
            if isinstance(op, self._op) and self._pattern.search(op.key):
                ledger().note("KILL", op.key, moment)  # fsynced before dying
                os.kill(os.getpid(), signal.SIGKILL)


# --- workflows -------------------------------------------------------------------------


@activity
async def echo(value: str) -> str:
    await asyncio.sleep(0.002)
    return value


@activity
async def beat(run_id: str, label: str) -> None:
    n = ledger().begin(run_id, label)
    await asyncio.sleep(0.02)
    ledger().end(run_id, label, n)


@workflow
async def inbox(ctx: WorkflowContext) -> list[str]:
    """Consume ``item`` signals in order until the payload ``stop``; echo each one first."""
    got: list[str] = []
    while True:
        payload = await ctx.wait_for_signal("item")
        ledger().note("SEEN", ctx.workflow_id, payload, len(got), sync=False)  # also on replay
        if payload == "stop":
            return got
        got.append(await ctx.run(echo, payload))


@workflow
async def cart(ctx: WorkflowContext) -> list[str]:
    """Collect ``add`` updates (answer: ``count|payload``) until ``finish`` or a ``stop`` signal."""
    items: list[str] = []
    finished = False

    def add(payload: str) -> str:
        items.append(payload)
        return f"{len(items)}|{payload}"

    def finish() -> str:
        nonlocal finished
        finished = True
        return f"finished|{len(items)}"

    ctx.on_update("add", add)
    ctx.on_update("finish", finish)
    ctx.on_query("items", lambda: list(items))
    while not finished:
        try:
            await ctx.wait_for_signal("stop", timeout=0.03)
            break
        except WaitTimeoutError:
            pass
        await ctx.run(echo, "tick")
    return items


@workflow
async def reviewed(ctx: WorkflowContext) -> str:
    """Ask one review (step 1), then run one activity, then return the decision."""
    decision = await ctx.review({"run": ctx.workflow_id}, review_type="copy", reviewers=["ed"])
    await ctx.run(echo, decision.decision)
    return f"{decision.decision}|{decision.reviewer}|{decision.feedback}"


@workflow
async def parked(ctx: WorkflowContext) -> str:
    """Wait for a ``go`` signal that never comes (the run is cancelled)."""
    await ctx.wait_for_signal("go")
    return "went"


@workflow
async def looper(ctx: WorkflowContext) -> int:
    """Run 200 short activities, each writing BEGIN/END to the ledger."""
    for i in range(1, 201):
        await ctx.run(beat, ctx.workflow_id, f"{i:03d}")
    return 200


WORKFLOWS: dict[str, Any] = {
    "inbox": inbox,
    "cart": cart,
    "reviewed": reviewed,
    "parked": parked,
    "looper": looper,
}


# --- serve -------------------------------------------------------------------------------


async def outcome(engine: Engine, run_id: str) -> str:
    try:
        value = await engine.get_handle(run_id).result()
    except Exception as exc:
        return type(exc).__name__
    return "completed:" + str(value).replace(" ", "")


async def cart_caller(
    engine: Engine, ledger_file: str, run_id: str, updates: int, finish: bool
) -> None:
    """Send ``add`` updates one by one; after a crash, resend the unacknowledged ones."""
    done = kitm.notes(Path(ledger_file), "ACK")
    acked = {e.label.split("=", 1)[0] for e in done if e.run == run_id}
    pace = random.Random(f"{run_id}/{ledger().lifetime}")
    todo: list[tuple[str, str, str | None]] = [
        (f"{i:03d}", "add", f"p{i:03d}") for i in range(updates)
    ]
    if finish:
        todo.append(("finish", "finish", None))
    for index, name, payload in todo:
        if index in acked:
            continue
        key = f"{run_id}/{index}"
        args = () if payload is None else (payload,)
        answer = await engine.update(run_id, name, *args, idempotency_key=key, timeout=30)
        ledger().note("ACK", run_id, f"{index}={answer}", 0)
        await asyncio.sleep(pace.uniform(0.0, 0.04))  # keep the workload longer than the kills


async def serve(args: argparse.Namespace) -> int:
    global _ledger
    _ledger = kitm.MessageLedger(args.ledger, args.lifetime)
    inner = open_storage(args.db) if "://" in args.db else SQLiteStorage(args.db)
    storage = KillSwitchStorage(inner, args.trigger)
    runs = args.runs.split(",")
    try:
        async with Engine(
            storage, workflows=list(WORKFLOWS.values()), activities=[echo, beat], poll_interval=0.05
        ) as engine:
            for run_id in runs:
                await engine.start(WORKFLOWS[args.workflow], id=run_id, on_conflict="use_existing")
            _ledger.start()  # the runs exist and this engine drives them
            callers = [
                asyncio.create_task(cart_caller(engine, args.ledger, r, args.updates, args.finish))
                for r in runs
                if args.updates or args.finish
            ]
            outcomes = await asyncio.gather(*(outcome(engine, r) for r in runs))
            await asyncio.gather(*callers)
            for run_id, out in zip(runs, outcomes, strict=True):
                _ledger.note("OUT", run_id, out)
    finally:
        await storage.close()
    _ledger.done()
    return 0


# --- send --------------------------------------------------------------------------------


async def send(args: argparse.Namespace) -> int:
    global _ledger
    _ledger = kitm.MessageLedger(args.ledger, args.lifetime)
    store = args.db if "://" in args.db else f"sqlite:///{args.db}"
    async with Engine(store, role="client", poll_interval=0.05) as engine:

        async def one(i: int) -> None:
            payload = f"{args.lifetime}-{i}"
            ledger().note("SEND", args.workflow_id, payload, i)
            if args.kind == "signal":
                await engine.signal(args.workflow_id, args.name, payload, signal_id=args.key)
                answer = "ok"
            else:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        answer = await engine.update(
                            args.workflow_id,
                            args.name,
                            payload,
                            idempotency_key=args.key,
                            timeout=1.0,
                        )
                        break
                    except UpdateTimeoutError:
                        if time.monotonic() > deadline:
                            raise
            ledger().note("ACK", args.workflow_id, str(answer), i)

        _ledger.start()
        await asyncio.to_thread(_wait_for_file, Path(args.go))
        await asyncio.gather(*(one(i) for i in range(args.coroutines)))
    _ledger.done()
    return 0


def _wait_for_file(path: Path) -> None:
    while not path.exists():
        time.sleep(0.002)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    for name in ("db", "ledger", "lifetime", "workflow", "runs"):
        s.add_argument(name)
    s.add_argument("--trigger")
    s.add_argument("--updates", type=int, default=0)
    s.add_argument("--finish", action="store_true")
    c = sub.add_parser("send")
    for name in ("db", "ledger", "lifetime", "kind", "workflow_id", "name", "key"):
        c.add_argument(name)
    c.add_argument("--coroutines", type=int, required=True)
    c.add_argument("--go", required=True)
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    parsed = parse(sys.argv[1:])
    sys.exit(asyncio.run(serve(parsed) if parsed.command == "serve" else send(parsed)))
