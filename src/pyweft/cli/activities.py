"""``pyweft activities list|complete|fail|heartbeat``: activities waiting to be completed
by token (an activity that returned ``activity_context().complete_async()``).

A completion is written to the store before the command returns; the engine
that drives the run continues it at once (or when it next polls the store), and
a run nobody drives applies it when it is recovered.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from pyweft import ApplicationError, PendingActivity
from pyweft.cli import DbOption, JsonOption, json_argument, render, run
from pyweft.cli.store import open_engine

app = typer.Typer(
    help="List activities waiting for completion by token, and complete or fail them.",
    no_args_is_help=True,
    add_completion=False,
)

TokenArgument = Annotated[
    str, typer.Argument(metavar="TOKEN", help="From `activities list` (pwa1:...).")
]


async def _list(db: str | None, workflow_id: str | None, limit: int) -> list[PendingActivity]:
    async with open_engine(db, read_only=True) as engine:
        return await engine.pending_activities(workflow_id, limit=limit)


@app.command("list")
def list_pending(
    workflow_id: Annotated[
        str | None, typer.Option("--workflow", metavar="ID", help="Only this run's activities.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 50,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """List activities waiting for completion by token."""
    items = run(_list(db, workflow_id, limit))
    if as_json:
        render.print_json(
            {
                "items": [
                    {
                        "token": p.token,
                        "workflow_id": p.workflow_id,
                        "activity": p.activity,
                        "step": p.step,
                        "attempt": p.attempt,
                        "since": p.since.isoformat(),
                        "heartbeat_details": p.heartbeat_details,
                    }
                    for p in items
                ]
            }
        )
        return
    out = render.console()
    if not items:
        out.print("no activities wait for completion")
    for p in items:
        out.print(
            f"[bold]{escape(p.token)}[/]\n  workflow  {escape(p.workflow_id)} step {p.step} "
            f"({escape(p.activity)}, attempt {p.attempt})\n  since     {render.when(p.since)}",
            soft_wrap=True,
        )


async def _complete(db: str | None, token: str, result: object) -> None:
    async with open_engine(db) as engine:
        await engine.complete_activity(token, result)


async def _fail(db: str | None, token: str, error: BaseException | str) -> None:
    async with open_engine(db) as engine:
        await engine.fail_activity(token, error)


async def _heartbeat(db: str | None, token: str, details: object) -> None:
    async with open_engine(db) as engine:
        await engine.heartbeat_activity(token, details)


@app.command("complete")
def complete(
    token: TokenArgument,
    result: Annotated[
        str, typer.Option("--result", metavar="JSON", help="The activity's result, as JSON.")
    ] = "null",
    db: DbOption = None,
) -> None:
    """Complete the activity waiting on TOKEN with --result (JSON). Tokens are single-use."""
    value = json_argument(result, "--result")
    run(_complete(db, token, value))
    render.console().print(f"completed {escape(token)}", soft_wrap=True)


@app.command("fail")
def fail(
    token: TokenArgument,
    message: Annotated[str, typer.Option("--message", metavar="TEXT", help="Why it failed.")],
    error_type: Annotated[
        str, typer.Option("--type", metavar="NAME", help="The error type the workflow sees.")
    ] = "ApplicationError",
    non_retryable: Annotated[
        bool, typer.Option("--non-retryable", help="Do not retry, whatever the policy says.")
    ] = False,
    db: DbOption = None,
) -> None:
    """Fail the attempt waiting on TOKEN (retried per its policy unless --non-retryable)."""
    error = ApplicationError(message, type=error_type, non_retryable=non_retryable)
    run(_fail(db, token, error))
    render.console().print(f"failed {escape(token)}", soft_wrap=True)


@app.command("heartbeat")
def heartbeat(
    token: TokenArgument,
    details: Annotated[
        str, typer.Option("--details", metavar="JSON", help="Progress to record, as JSON.")
    ] = "null",
    db: DbOption = None,
) -> None:
    """Keep the activity waiting on TOKEN alive (its heartbeat_timeout) and record progress."""
    value = json_argument(details, "--details")
    run(_heartbeat(db, token, value))
    render.console().print(f"heartbeat recorded for {escape(token)}", soft_wrap=True)
