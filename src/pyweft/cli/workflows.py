"""``pyweft workflows list|show``: read runs from a store without driving them."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from pyweft import Engine, Page, StepInfo, WorkflowInfo
from pyweft.cli import DbOption, JsonOption, render, run

app = typer.Typer(
    help="Inspect workflow runs stored in a database.", no_args_is_help=True, add_completion=False
)


async def _list(
    db: str | None, status: str | None, workflow_type: str | None, limit: int, cursor: str | None
) -> Page[WorkflowInfo]:
    # recover=False: looking at runs must never resume them in this process.
    async with Engine(db, recover=False) as engine:
        return await engine.list(
            status=status, workflow_type=workflow_type, limit=limit, cursor=cursor
        )


async def _show(db: str | None, workflow_id: str) -> tuple[WorkflowInfo, list[StepInfo]]:
    async with Engine(db, recover=False) as engine:
        return await engine.describe(workflow_id), (await engine.history(workflow_id)).steps


@app.command("list")
def list_runs(
    db: DbOption = None,
    status: Annotated[
        str | None, typer.Option("--status", help="Only runs in this status, e.g. running.")
    ] = None,
    workflow_type: Annotated[
        str | None, typer.Option("--type", help="Only runs of this workflow type.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="Runs per page (1-1000).")] = 50,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Continue from a previous page's cursor.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List runs, newest first."""
    page = run(_list(db, status, workflow_type, limit, cursor))
    if as_json:
        render.print_json(
            {"items": [render.info_dict(i) for i in page.items], "next_cursor": page.next_cursor}
        )
        return
    out = render.console()
    if not page.items:
        out.print("no workflow runs match")
    else:
        out.print(render.runs_table(page.items))
    if page.next_cursor is not None:
        out.print(f"more runs: --cursor {page.next_cursor}", soft_wrap=True)


@app.command("show")
def show_run(
    workflow_id: Annotated[str, typer.Argument(metavar="ID", help="The workflow run id.")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one run: its state, result or error, and every step of its history."""
    info, steps = run(_show(db, workflow_id))
    if as_json:
        render.print_json({**render.info_dict(info), "steps": [render.step_dict(s) for s in steps]})
        return
    out = render.console()
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column(overflow="fold")
    summary.add_row("id", escape(info.id))
    summary.add_row("status", render.status_text(info.status))
    summary.add_row("type", f"{escape(info.workflow_type)} (version {info.version})")
    summary.add_row("created", render.when(info.created_at))
    summary.add_row("updated", render.when(info.updated_at))
    if info.status == "completed":
        summary.add_row("result", escape(render.value_text(info.result)))
    if info.error is not None:
        summary.add_row("error", escape(f"{info.error.type}: {info.error.message}"))
    if info.cancel_requested and info.status != "cancelled":
        summary.add_row("cancel", "requested")
    out.print(summary)
    out.print()
    out.print(render.steps_table(steps, info.created_at) if steps else "no steps recorded yet")
