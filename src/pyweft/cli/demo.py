"""``pyweft demo``: an order-fulfilment workflow you can kill at any moment and resume.

Each order runs five durable steps. Kill the process (Ctrl-C, ``kill -9``)
and run the demo again: the engine replays the recorded steps from the
journal and carries on live. A side file, the *ledger*, records every real
execution of an activity, so the demo can show (and its tests can check)
that completed work is never repeated.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pyweft import (
    Engine,
    PyweftError,
    SQLiteStorage,
    StoreInUseError,
    WorkflowContext,
    WorkflowInfo,
    activity,
    workflow,
)
from pyweft.cli import DATABASE_ENV, db_flag, render, run

DEMO_TYPE = "demo.fulfil_order"
DEFAULT_DB = "pyweft-demo.db"
STEPS = 5
_CATALOGUE = (("espresso machine", 1, 24900), ("coffee beans 1kg", 3, 1850), ("milk jug", 2, 1500))


class DemoError(Exception):
    """The demo cannot run as asked (not a SQLite file, reset of a non-demo store...)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Order:
    id: str
    item: str
    quantity: int
    total_cents: int
    email: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Receipt:
    order_id: str
    reservation: str
    charge: str
    total: str
    tracking: str
    emailed_to: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Pace:
    work_s: float  # a typical activity's duration
    warehouse_s: float  # the durable sleep


NORMAL = Pace(work_s=0.7, warehouse_s=4.0)
FAST = Pace(work_s=0.15, warehouse_s=1.0)


def make_order(n: int) -> Order:
    item, quantity, cents = _CATALOGUE[(n - 1) % len(_CATALOGUE)]
    return Order(
        id=f"order-{n}",
        item=item,
        quantity=quantity,
        total_cents=quantity * cents,
        email=f"customer{n}@example.com",
    )


class Ledger:
    """Append-only record of real activity executions: ``pid  order  activity  event``."""

    def __init__(self, path: Path, console: Console) -> None:
        self.path = path
        self._console = console
        self.started = 0  # activity executions this process began (what really ran here)

    def events(self, order_id: str, name: str) -> list[tuple[str, str]]:
        """``(pid, "start" | "done")`` for every earlier execution of this activity."""
        if not self.path.exists():
            return []
        rows = (line.split("\t") for line in self.path.read_text().splitlines())
        return [(r[0], r[3]) for r in rows if len(r) == 4 and r[1:3] == [order_id, name]]

    def _append(self, order_id: str, name: str, event: str) -> None:
        with self.path.open("a") as f:  # one write per line: a kill -9 never leaves half a line
            f.write(f"{os.getpid()}\t{order_id}\t{name}\t{event}\n")

    @contextmanager
    def executing(self, order_id: str, name: str) -> Iterator[None]:
        earlier = self.events(order_id, name)
        if earlier:
            self._console.print(f"[yellow]{escape(f'[{order_id}]')} {_earlier(name, earlier)}[/]")
        self.started += 1
        self._append(order_id, name, "start")
        yield
        self._append(order_id, name, "done")


def _earlier(name: str, earlier: list[tuple[str, str]]) -> str:
    """Why an activity that already ran in another process is running again, told truly."""
    pids = sorted({pid for pid, _ in earlier})
    alive = [pid for pid in pids if _alive(int(pid))]
    done = any(event == "done" for _, event in earlier)
    if alive:
        return (
            f"{name} is also running in live pid {', '.join(alive)}: two engines are driving "
            "this database at once, so this step runs twice. Stop one of them."
        )
    how = "finished" if done else "was interrupted"
    return (
        f"{name} {how} in pid {', '.join(pids)} (no longer running) before its result was "
        "recorded; running it again (activities run at least once: make real ones idempotent)"
    )


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class Reporter:
    """Prints one line per step, marking replayed steps apart from executed ones."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.executed = 0
        self.replayed = 0

    def step(
        self, order_id: str, n: int, label: str, detail: str, took_s: float, replayed: bool
    ) -> None:
        head = f"{escape(f'[{order_id}]')} step {n}/{STEPS} {label}"
        if replayed:
            self.replayed += 1
            self.console.print(f"[dim]{head} ✓ {escape(detail)}  ↺ replayed from journal[/]")
        else:
            self.executed += 1
            self.console.print(
                f"{head} [green]✓[/] {escape(detail)}  [cyan]{took_s:.1f}s, executed now[/]"
            )

    def waiting(self, order_id: str, n: int, seconds: float) -> None:
        self.console.print(
            f"{escape(f'[{order_id}]')} step {n}/{STEPS} waiting for the warehouse… "
            f"[dim](a durable {seconds:g}s timer)[/]"
        )


class _Steps:
    """Runs a workflow's steps and reports each; wall-clock reads here are display only."""

    def __init__(self, ctx: WorkflowContext, order_id: str, report: Reporter) -> None:
        self._ctx, self._order_id, self._report = ctx, order_id, report

    async def run(self, n: int, act: Callable[..., Any], *args: Any) -> Any:
        replayed, started = self._ctx.is_replaying, time.monotonic()
        value = await self._ctx.run(act, *args)
        took = time.monotonic() - started
        self._report.step(self._order_id, n, act.__name__, str(value), took, replayed)
        return value

    async def sleep(self, n: int, seconds: float) -> None:
        replayed, started = self._ctx.is_replaying, time.monotonic()
        if not replayed:
            self._report.waiting(self._order_id, n, seconds)
        await self._ctx.sleep(seconds)
        took = time.monotonic() - started
        self._report.step(self._order_id, n, "warehouse", "ready", took, replayed)


def build_workflow(pace: Pace, ledger: Ledger, report: Reporter) -> Callable[..., Any]:
    """The demo workflow and its activities, bound to this run's pace, ledger and console."""

    def seconds(order: Order, factor: float) -> float:
        return pace.work_s * factor * (1 + 0.2 * (len(order.item) % 3))

    @activity
    async def reserve_inventory(order: Order) -> str:
        with ledger.executing(order.id, "reserve_inventory"):
            await asyncio.sleep(seconds(order, 0.6))
        return f"RSV-{order.id.removeprefix('order-')}x{order.quantity}"

    @activity
    def charge_payment(order: Order) -> str:  # a blocking call: runs in a worker thread
        with ledger.executing(order.id, "charge_payment"):
            time.sleep(seconds(order, 1.0))
        return f"ch_{uuid.uuid4().hex[:12]}"

    @activity
    def ship_order(order: Order, reservation: str) -> str:
        with ledger.executing(order.id, "ship_order"):
            time.sleep(seconds(order, 1.2))
        return f"1Z{uuid.uuid4().int % 10**10:010d}"

    @activity
    async def send_receipt(order: Order, tracking: str) -> str:
        with ledger.executing(order.id, "send_receipt"):
            await asyncio.sleep(seconds(order, 0.5))
        return order.email

    @workflow(name=DEMO_TYPE)
    async def fulfil_order(ctx: WorkflowContext, order: Order) -> Receipt:
        steps = _Steps(ctx, order.id, report)
        reservation: str = await steps.run(1, reserve_inventory, order)
        charge: str = await steps.run(2, charge_payment, order)
        await steps.sleep(3, pace.warehouse_s)
        tracking: str = await steps.run(4, ship_order, order, reservation)
        emailed: str = await steps.run(5, send_receipt, order, tracking)
        return Receipt(
            order_id=order.id,
            reservation=reservation,
            charge=charge,
            total=f"${order.total_cents / 100:.2f}",
            tracking=tracking,
            emailed_to=emailed,
        )

    return fulfil_order


# --- the runner ---------------------------------------------------------------------


def _sqlite_path(engine: Engine) -> Path:
    storage = engine.storage
    if not isinstance(storage, SQLiteStorage):
        kind = type(storage).__name__
        why = (
            "memory:// keeps nothing once the process exits, so there would be nothing to resume"
            if kind == "MemoryStorage"
            else f"it keeps its execution ledger in a file beside the database, which {kind} "
            "does not have"
        )
        raise DemoError(
            f"the demo needs a SQLite file: {why}. Run it with --db pyweft-demo.db (the "
            "default), or any other .db path"
        )
    return Path(storage.path)


async def _all_runs(engine: Engine, workflow_type: str | None = None) -> list[WorkflowInfo]:
    runs: list[WorkflowInfo] = []
    cursor: str | None = None
    while True:
        page = await engine.list(workflow_type=workflow_type, limit=1000, cursor=cursor)
        runs += page.items
        if (cursor := page.next_cursor) is None:
            return runs


async def reset(url: str, out: Console) -> None:
    """Delete the demo database and ledger, refusing if the store holds other workflows."""
    async with Engine(url, role="client") as engine:
        db = _sqlite_path(engine)
        others = {i.workflow_type for i in await _all_runs(engine)} - {DEMO_TYPE}
    if others:
        raise DemoError(
            f"refusing to reset {db}: it also holds {', '.join(sorted(others))} runs, so it is "
            "not a demo database; point --db at the demo's own file"
        )
    for path in (
        db,
        *(Path(f"{db}{s}") for s in ("-wal", "-shm", ".lock")),
        db.with_suffix(".ledger"),
    ):
        path.unlink(missing_ok=True)
    out.print(f"reset: deleted {escape(str(db))} and its ledger")


def _results_table(outcomes: dict[str, Receipt | PyweftError]) -> Table:
    table = Table(show_edge=False, header_style="bold")
    for column in ("workflow id", "status", "charge", "total", "tracking"):
        table.add_column(column, overflow="fold")
    for wid, outcome in outcomes.items():
        if isinstance(outcome, Receipt):
            row = (outcome.charge, outcome.total, outcome.tracking)
            table.add_row(escape(wid), render.status_text("completed"), *map(escape, row))
        else:
            status = render.status_text("failed")
            table.add_row(escape(wid), status, escape(f"{outcome.code}: {outcome}"), "", "")
    return table


async def _outcome(engine: Engine, workflow_id: str) -> Receipt | PyweftError:
    try:
        result: Receipt = await engine.get_handle(workflow_id).result()
    except PyweftError as exc:  # a failed or cancelled run is reported, not raised
        return exc
    return result


async def run_demo(url: str, orders: int, pace: Pace, out: Console) -> bool:
    """Run (or resume) the demo orders; True when every one completed."""
    # recover=False at first so the plan prints before recovered runs start printing.
    async with Engine(url, recover=False) as engine:
        db = _sqlite_path(engine)
        report = Reporter(out)
        ledger = Ledger(db.with_suffix(".ledger"), out)
        fulfil = build_workflow(pace, ledger, report)
        engine.register_workflow(fulfil)
        known = {i.id: i for i in await _all_runs(engine, DEMO_TYPE)}
        ids = [f"demo-{make_order(n).id}" for n in range(1, orders + 1)]
        unfinished = [i for i, info in known.items() if not info.is_terminal]
        wanted = ids + [i for i in unfinished if i not in ids]
        if not unfinished and all(i in known for i in ids):
            out.print(f"All {len(ids)} demo orders in {escape(str(db))} are already complete:")
            out.print(_results_table({i: await _outcome(engine, i) for i in ids}))
            again = escape(f"pyweft demo --reset{_db_flag(url)}")
            out.print(f"To start over: [bold]{again}[/] (deletes the demo database).")
            return all(known[i].status == "completed" for i in ids)
        _intro(out, db, len(ids), _db_flag(url))
        for wid in wanted:
            out.print(f"  {escape(wid)}: {await _progress(engine, known.get(wid))}")
        await engine.recover_all()
        for n in range(1, orders + 1):
            await engine.start(fulfil, make_order(n), id=ids[n - 1], on_conflict="use_existing")
        results = await asyncio.gather(*(_outcome(engine, i) for i in wanted))
    outcomes = dict(zip(wanted, results, strict=True))
    out.print()
    out.print(_results_table(outcomes))
    out.print(
        f"This process ran {ledger.started} activit{'y' if ledger.started == 1 else 'ies'} and "
        f"replayed {report.replayed} step(s) from the journal. Every real execution is logged "
        f"in {escape(str(ledger.path))}."
    )
    return all(isinstance(o, Receipt) for o in outcomes.values())


async def _progress(engine: Engine, info: WorkflowInfo | None) -> str:
    if info is None:
        return "new run"
    if info.is_terminal:
        return f"already {info.status}"
    steps = await engine.history(info.id)
    done = sum(1 for s in steps if s.status != "open")
    text = f"resuming, {done} step(s) in the journal"
    for step in steps:
        if step.status == "open" and step.kind == "sleep" and step.next_attempt_at is not None:
            left = (step.next_attempt_at - datetime.now(UTC)).total_seconds()
            text += f", warehouse timer due in {max(left, 0.0):.1f}s"
    return text


def _db_flag(url: str) -> str:
    """The ``--db`` a rerun needs: the one the user gave, or nothing for the default file."""
    return "" if url == DEFAULT_DB else db_flag(url)


def _intro(out: Console, db: Path, orders: int, flag: str) -> None:
    pid = os.getpid()
    out.print(f"[bold]pyweft demo[/]: {orders} order(s) on {escape(str(db))} (pid {pid})")
    out.print(
        "Each order: reserve_inventory → charge_payment → wait for the warehouse (a durable "
        "timer that keeps its deadline across restarts) → ship_order → send_receipt."
    )
    out.print(
        f"[bold yellow]Press Ctrl-C or kill -9 {pid} at any time, then run "
        f"`{escape(f'python3 tasks.py demo{flag}')}` (or `{escape(f'pyweft demo{flag}')}`) "
        "again: completed steps are not repeated and the run "
        "resumes where it stopped.[/]"
    )


def _in_use_hint(db: str, exc: PyweftError) -> None:
    if isinstance(exc, StoreInUseError):
        held = f" ({exc.holder})" if exc.holder else ""
        render.hint(
            f"Another engine{held} already drives {db}: most likely an earlier demo that is "
            "still running. Let it finish or stop it, then run the demo again to resume; or "
            "start a separate demo with --db another-demo.db."
        )


def demo(
    # No envvar on purpose: the demo must not write into (or fail on) the store that
    # $PYWEFT_DATABASE_URL names for the user's own app.
    db: Annotated[
        str,
        typer.Option(
            "--db",
            help=f"SQLite file (path or sqlite:/// URL). Ignores ${DATABASE_ENV}: the demo "
            "keeps to its own file unless you name one here.",
        ),
    ] = DEFAULT_DB,
    orders: Annotated[int, typer.Option("--orders", min=1, max=50, help="How many orders.")] = 3,
    fast: Annotated[bool, typer.Option("--fast", help="Shorter steps and timer.")] = False,
    fresh: Annotated[
        bool, typer.Option("--reset", help="Delete the demo database and ledger first.")
    ] = False,
) -> None:
    """Run an order-fulfilment workflow you can kill at any moment and resume."""
    out = render.console()
    try:
        if fresh:
            run(reset(db, out), on_error=partial(_in_use_hint, db))
        ok = run(
            run_demo(db, orders, FAST if fast else NORMAL, out), on_error=partial(_in_use_hint, db)
        )
    except DemoError as exc:
        render.error("DemoError", str(exc))
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        out.print(
            "\n[yellow]Interrupted.[/] Finished steps are safe in the journal; run "
            f"`{escape(f'pyweft demo{_db_flag(db)}')}` again to resume where it stopped (a "
            "step that was in flight runs again)."
        )
        raise typer.Exit(130) from None
    if not ok:
        raise typer.Exit(1)
