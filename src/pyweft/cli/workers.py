"""``pyweft workers list|drain|resume``: the worker processes serving this store's queues."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from pyweft import ActivityQueueInfo, WorkerInfo
from pyweft.cli import DbOption, JsonOption, render, run
from pyweft.cli.store import open_engine

app = typer.Typer(
    help="List the worker processes that serve activity task queues and those queues; "
    "drain or resume a worker.",
    no_args_is_help=True,
    add_completion=False,
)

WorkerArgument = Annotated[str, typer.Argument(metavar="ID", help="From `workers list`.")]


def as_json(w: WorkerInfo) -> dict[str, Any]:
    return {
        "id": w.id,
        "status": w.status,
        "queues": list(w.queues),
        "activities": list(w.activities),
        "concurrency": w.concurrency,
        "in_flight": w.in_flight,
        "completed": w.completed,
        "failed": w.failed,
        "drain_requested": w.drain_requested,
        "host": w.host,
        "pid": w.pid,
        "started_at": w.started_at.isoformat(),
        "last_heartbeat": w.last_heartbeat.isoformat(),
    }


async def _list(db: str | None, include_gone: bool) -> list[WorkerInfo]:
    async with open_engine(db, read_only=True) as engine:
        return await engine.workers(include_gone=include_gone)


@app.command("list")
def list_workers(
    include_gone: Annotated[
        bool, typer.Option("--all", help="Also workers whose heartbeat is overdue.")
    ] = False,
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """List live workers: queues, in flight, last heartbeat."""
    items = run(_list(db, include_gone))
    if json_out:
        render.print_json({"items": [as_json(w) for w in items]})
        return
    out = render.console()
    if not items:
        out.print("no live workers")
    for w in items:
        out.print(
            f"[bold]{escape(w.id)}[/] {w.status}\n  queues     {escape(', '.join(w.queues))}\n"
            f"  in flight  {w.in_flight}/{w.concurrency} (done {w.completed}, failed {w.failed})\n"
            f"  heartbeat  {render.when(w.last_heartbeat)}",
            soft_wrap=True,
        )


def queue_json(q: ActivityQueueInfo) -> dict[str, Any]:
    lim = q.limits
    return {
        "name": q.name,
        "waiting": q.waiting,
        "in_flight": q.in_flight,
        "oldest_waiting_s": q.oldest_waiting_s,
        "workers": q.workers,
        "draining_workers": q.draining_workers,
        "slots": q.slots,
        "concurrency_limit": None if lim is None else lim.concurrency,
        "rate_limit": None
        if lim is None or lim.rate_count is None
        else {"count": lim.rate_count, "window_s": lim.rate_window_s},
    }


async def _queues(db: str | None, queue: str | None) -> list[ActivityQueueInfo]:
    async with open_engine(db, read_only=True) as engine:
        return await engine.activity_queues(queue)


@app.command("queues")
def queues(
    queue: Annotated[
        str | None, typer.Argument(metavar="[QUEUE]", help="Only this activity queue.")
    ] = None,
    db: DbOption = None,
    json_out: JsonOption = False,
) -> None:
    """Activity task queues: tasks waiting and in flight, oldest wait, workers, limits."""
    items = run(_queues(db, queue))
    if json_out:
        render.print_json({"items": [queue_json(q) for q in items]})
        return
    out = render.console()
    if not items:
        out.print("no activity queues with tasks or workers")
    for q in items:
        oldest = "-" if q.oldest_waiting_s is None else f"{q.oldest_waiting_s:.1f}s"
        lim = q.limits
        limits = []
        if lim is not None and lim.concurrency is not None:
            limits.append(f"at most {lim.concurrency} at once")
        if lim is not None and lim.rate_count is not None:
            limits.append(f"{lim.rate_count} per {lim.rate_window_s:g}s")
        out.print(
            f"[bold]{escape(q.name)}[/]\n  waiting    {q.waiting} (oldest {oldest})\n"
            f"  in flight  {q.in_flight}\n"
            f"  workers    {q.workers} claiming, {q.draining_workers} draining\n"
            f"  limits     {', '.join(limits) or 'none'}",
            soft_wrap=True,
        )


async def _set(db: str | None, worker_id: str, drain: bool) -> WorkerInfo | None:
    async with open_engine(db) as engine:
        if drain:
            return await engine.drain_worker(worker_id)
        return await engine.resume_worker(worker_id)


def _done(worker_id: str, what: str, json_out: bool) -> None:
    if json_out:
        render.print_json({"id": worker_id, "requested": what})
    else:
        render.console().print(f"{what} requested for worker {escape(worker_id)}", soft_wrap=True)


@app.command("drain")
def drain(worker_id: WorkerArgument, db: DbOption = None, json_out: JsonOption = False) -> None:
    """Stop a worker from claiming tasks (what it runs finishes); it stays up."""
    run(_set(db, worker_id, True))
    _done(worker_id, "drain", json_out)


@app.command("resume")
def resume(worker_id: WorkerArgument, db: DbOption = None, json_out: JsonOption = False) -> None:
    """Let a drained worker claim tasks again."""
    run(_set(db, worker_id, False))
    _done(worker_id, "resume", json_out)
