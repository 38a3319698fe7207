"""``pyweft doctor``: can this process reach the store, what does it promise, and is every
record in it readable?

Doctor decodes every record (a progress bar shows on a terminal for large
stores), names each damaged key and exits 1 if it found any.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import pyweft
from pyweft import Engine, PyweftError, SQLiteStorage, Storage, StoreOwnership
from pyweft.cli import DbOption, JsonOption, render
from pyweft.cli.render import escape
from pyweft.cli.store import open_engine
from pyweft.storage import default_storage_url

_PAGE = 1000
PROGRESS_FROM = 20_000  # keys: smaller stores are checked before a bar would be seen
_SHOWN_UNRECOGNISED = 10
LATE_AFTER_S = 60.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Report:
    """What doctor found; also its ``--json`` output."""

    pyweft_version: str
    python_version: str
    url: str
    kind: str
    location: str | None
    reachable: bool
    persistence: str
    durable_commit: bool
    durability: str
    schema_version: int | None
    supported_schema_version: int
    new_store: bool
    runs: dict[str, int]
    total_runs: int
    ownership_mode: str | None = None
    lease_holder: str | None = None
    lease_epoch: int | str | None = None
    lease_expires_at: str | None = None
    lease_live: bool = False
    live_claims: int = 0
    records_checked: int = 0
    damaged: list[dict[str, str | None]] = field(default_factory=list)  # key, workflow_id, problem
    quarantined: list[str] = field(default_factory=list)  # run ids set aside by an engine
    unrecognised_keys: list[str] = field(default_factory=list)
    schedules: int = 0
    # Active schedules due more than LATE_AFTER_S ago: no engine that registers their
    # workflow is firing them (id, workflow_type, next_fire, late_by_s).
    late_schedules: list[dict[str, object]] = field(default_factory=list)


def durability_of(storage: Storage) -> str:
    caps = storage.capabilities
    if caps.persistence == "ephemeral":
        return "none: memory only, everything is lost when the process exits"
    mode = f" (synchronous={storage.synchronous})" if isinstance(storage, SQLiteStorage) else ""
    if caps.durable_commit:
        return f"durable{mode}: a commit survives process crashes and power loss"
    return f"survives process crashes, not power loss{mode}"


ProgressHook = Callable[[int, int | None], None]


async def examine(url: str, progress: ProgressHook | None = None) -> Report:
    # A read-only client: the doctor looks; it never writes or resumes anybody's runs.
    async with open_engine(url, read_only=True) as engine:
        counts: Counter[str] = Counter()
        for group in await engine.aggregate(group_by="status"):
            counts[str(group.key)] = group.count
        ownership = await engine.store_ownership()
        check = await engine.visibility.check_records(progress=progress)
        schedules = await engine.schedules.list()
        late = await engine.schedules.late(LATE_AFTER_S)
        now = engine.clock.now()
    return dataclasses.replace(
        _report(url, engine, counts, ownership),
        records_checked=check.checked,
        damaged=[
            {"key": d.key, "workflow_id": d.workflow_id, "problem": d.problem}
            for d in check.damaged
        ],
        quarantined=check.quarantined,
        unrecognised_keys=check.unrecognised,
        schedules=len(schedules),
        late_schedules=[
            {
                "id": s.id,
                "workflow_type": s.workflow_type,
                "next_fire": None if s.next_fire is None else s.next_fire.isoformat(),
                "late_by_s": None if s.next_fire is None else now - s.next_fire.timestamp(),
            }
            for s in late
        ],
    )


@contextmanager
def _progress_bar(show: bool) -> Iterator[ProgressHook | None]:
    """A bar on stderr while records are decoded, for large stores on a terminal."""
    stderr = Console(stderr=True)
    if not show or not stderr.is_terminal:
        yield None
        return
    bar = Progress(
        TextColumn("checking records"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )
    task = bar.add_task("records", total=None, visible=False)

    def advance(done: int, total: int | None) -> None:
        if total is not None and total < PROGRESS_FROM:
            return
        bar.update(task, completed=done, total=total, visible=True)

    with bar:
        yield advance


def _report(url: str, engine: Engine, counts: Counter[str], ownership: StoreOwnership) -> Report:
    storage = engine.storage
    expires = ownership.lease_expires_at
    return Report(
        ownership_mode=ownership.mode,
        lease_holder=ownership.lease_holder,
        lease_epoch=ownership.lease_epoch,
        lease_expires_at=None
        if expires is None
        else datetime.fromtimestamp(expires, tz=UTC).isoformat(),
        lease_live=ownership.lease_live,
        live_claims=ownership.live_claims,
        pyweft_version=pyweft.__version__,
        python_version=sys.version.split()[0],
        url=url,
        kind=type(storage).__name__,
        location=os.path.abspath(storage.path) if isinstance(storage, SQLiteStorage) else None,
        reachable=True,
        persistence=storage.capabilities.persistence,
        durable_commit=storage.capabilities.durable_commit,
        durability=durability_of(storage),
        schema_version=engine.schema_version,
        supported_schema_version=engine.supported_schema_version,
        new_store=engine.store_was_new,
        runs=dict(sorted(counts.items())),
        total_runs=sum(counts.values()),
    )


def _print(report: Report) -> None:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    grid.add_row("pyweft", f"{report.pyweft_version} (Python {report.python_version})")
    where = f" at {report.location}" if report.location else ""
    grid.add_row("storage", escape(f"{report.url} → {report.kind}{where}"))
    grid.add_row("reachable", "[green]yes[/]")
    style = "green" if report.durable_commit else "yellow"
    grid.add_row("durability", f"[{style}]{escape(report.durability)}[/]")
    schema = f"{report.schema_version} (this pyweft reads up to {report.supported_schema_version})"
    if report.new_store:
        schema += ", new store: initialised just now"
    grid.add_row("schema", schema)
    by_status = ", ".join(f"{n} {render.status_text(s)}" for s, n in report.runs.items())
    grid.add_row("runs", f"{report.total_runs} total" + (f": {by_status}" if by_status else ""))
    grid.add_row("ownership", escape(report.ownership_mode or "none (no fencing engine used it)"))
    if report.lease_holder is not None or report.lease_epoch is not None:
        state = "[green]live[/]" if report.lease_live else "[yellow]expired or released[/]"
        grid.add_row(
            "lease",
            f"{state}, holder {escape(str(report.lease_holder))}, epoch {report.lease_epoch}, "
            f"expires {report.lease_expires_at}",
        )
    if report.ownership_mode == "workflow-lease":
        grid.add_row("claims", f"{report.live_claims} live run claim(s)")
    if report.late_schedules:
        names = ", ".join(
            f"{escape(str(s['id']))} ({escape(str(s['workflow_type']))})"
            for s in report.late_schedules
        )
        grid.add_row(
            "schedules",
            f"{report.schedules}, [yellow]{len(report.late_schedules)} late[/] (due over "
            f"{LATE_AFTER_S:g}s ago; is an engine that registers their workflow running?): "
            f"{names}",
        )
    elif report.schedules:
        grid.add_row("schedules", f"[green]{report.schedules}, none late[/]")
    if report.damaged:
        grid.add_row(
            "records",
            f"[bold red]{len(report.damaged)} damaged[/] of {report.records_checked} checked",
        )
    else:
        grid.add_row("records", f"[green]{report.records_checked} checked, all readable[/]")
    if report.quarantined:
        ids = ", ".join(escape(i) for i in report.quarantined)
        grid.add_row("quarantined", f"[red]{len(report.quarantined)} run(s)[/]: {ids}")
    if report.unrecognised_keys:
        shown = ", ".join(escape(k) for k in report.unrecognised_keys[:_SHOWN_UNRECOGNISED])
        more = len(report.unrecognised_keys) - _SHOWN_UNRECOGNISED
        grid.add_row(
            "unrecognised",
            f"[yellow]{len(report.unrecognised_keys)} key(s) pyweft does not know[/]: {shown}"
            + (f" and {more} more" if more > 0 else ""),
        )
    out = render.console()
    out.print(grid)
    if report.damaged:
        out.print()
        out.print(_damaged_table(report.damaged))
        out.print()
        out.print(
            "Engines quarantine the runs these keys belong to and drive the others. Restore "
            "the records from a backup (the next engine to open lifts the quarantine), or "
            "purge a finished run.",
            soft_wrap=True,
        )


def _damaged_table(damaged: list[dict[str, str | None]]) -> Table:
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("damaged key", overflow="fold")
    table.add_column("run", overflow="fold")
    table.add_column("problem", overflow="fold")
    for row in damaged:
        table.add_row(
            escape(row["key"] or ""), escape(row["workflow_id"] or ""), escape(row["problem"] or "")
        )
    return table


def doctor(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Check that the store opens, report its durability, schema and run counts, and decode
    every record in it.

    Exits 1 when the store cannot be opened, or when a record cannot be decoded;
    each damaged key is named (under "damaged" with --json).
    """
    url = db or default_storage_url()
    try:
        with _progress_bar(not as_json) as progress:
            report = asyncio.run(examine(url, progress))
    except PyweftError as exc:
        if as_json:
            error = {"code": exc.code, "message": str(exc)}
            render.print_json({"url": url, "reachable": False, "error": error})
        render.error(exc.code, str(exc))
        raise typer.Exit(1) from None
    if as_json:
        render.print_json(asdict(report))
    else:
        _print(report)
    if report.damaged:
        raise typer.Exit(1)
