"""``pyweft queues list|show``: workflow queues, their depth, runs in flight and limits.

Read-only: the CLI opens the store as a reader, so it shows what every engine on the
store has enqueued and started, with the limits the engines last stored.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from pyweft import Engine, QueueInfo
from pyweft.cli import DbOption, JsonOption, render, run
from pyweft.cli.store import open_engine
from pyweft.durations import format_duration

app = typer.Typer(
    help="Workflow queues: depth, runs in flight, oldest waiting run, rate and limits.",
    no_args_is_help=True,
    add_completion=False,
)


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def _rate(info: QueueInfo) -> str:
    if info.rate_limit is None:
        return "-"
    count, window = info.rate_limit
    return f"{info.recent_starts}/{count} per {format_duration(window)}"


def _age(seconds: float) -> str:
    """A waiting time for people: whole seconds past ten seconds, tenths below."""
    return format_duration(round(seconds) if seconds >= 10 else round(seconds, 1))


def _table(items: list[QueueInfo]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in (
        "QUEUE",
        "DEPTH",
        "IN FLIGHT",
        "OLDEST WAIT",
        "RATE",
        "CONCURRENCY",
        "PER ENGINE",
    ):
        table.add_column(column)
    for q in items:
        depth = f"{q.depth} ({q.delayed} delayed)" if q.delayed else str(q.depth)
        table.add_row(
            escape(q.name),
            depth,
            str(q.in_flight),
            "-" if q.oldest_wait_s is None else _age(q.oldest_wait_s),
            _rate(q),
            _limit(q.concurrency),
            _limit(q.worker_concurrency),
        )
    return table


async def _read(db: str | None, action: Any) -> Any:
    async with open_engine(db, read_only=True) as engine:
        return await action(engine)


@app.command("list")
def list_queues(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Every workflow queue defined on the store, by name."""

    async def action(engine: Engine) -> list[QueueInfo]:
        return await engine.queues()

    items: list[QueueInfo] = run(_read(db, action))
    if as_json:
        render.print_json({"items": [q.to_dict() for q in items]})
    elif not items:
        render.console().print("no workflow queues")
    else:
        render.console().print(_table(items))


@app.command("show")
def show(
    name: Annotated[str, typer.Argument(metavar="QUEUE", help="The queue's name.")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """One workflow queue: depth, runs in flight, oldest waiting run, rate and limits."""

    async def action(engine: Engine) -> QueueInfo:
        return await engine.queue_info(name)

    info: QueueInfo = run(_read(db, action))
    if as_json:
        render.print_json(info.to_dict())
        return
    out = render.console()
    out.print(_table([info]))
    flags = [f for f, on in (("priority", info.priority), ("partitioned", info.partitioned)) if on]
    if info.partitioned:
        flags.append(f"{info.partitions} busy partition(s)")
    if flags:
        out.print(", ".join(flags))
