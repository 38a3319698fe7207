"""``pyweft state list|get``: durable shared state (``ctx.state``) as operators see it."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from pyweft import Engine
from pyweft.cli import DbOption, JsonOption, bad_parameter, render, run
from pyweft.cli.store import open_engine

app = typer.Typer(
    help="Read durable shared state (ctx.state) of a run family or a workflow type.",
    no_args_is_help=True,
    add_completion=False,
)

RunOpt = Annotated[
    str | None,
    typer.Option("--workflow", metavar="ID", help="State of this run and its children."),
]
TypeOpt = Annotated[
    str | None, typer.Option("--type", metavar="TYPE", help="State of this workflow type.")
]


def _owner(workflow_id: str | None, workflow_type: str | None) -> dict[str, str]:
    if (workflow_id is None) == (workflow_type is None):
        bad_parameter("name the owner with exactly one of --workflow ID or --type TYPE")
    return {"workflow_id": workflow_id} if workflow_id else {"workflow_type": str(workflow_type)}


async def _read(db: str | None, action: Any) -> Any:
    async with open_engine(db, read_only=True) as engine:
        return await action(engine)


@app.command("list")
def list_state(
    workflow_id: RunOpt = None,
    workflow_type: TypeOpt = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every value of one owner, by name."""
    owner = _owner(workflow_id, workflow_type)

    async def action(engine: Engine) -> dict[str, Any]:
        return await engine.state.list(**owner)

    values: dict[str, Any] = run(_read(db, action))
    if as_json:
        render.print_json({"owner": owner, "values": values})
        return
    out = render.console()
    if not values:
        out.print("no state")
    for name, value in sorted(values.items()):
        out.print(f"{escape(name)} = {escape(render.value_text(value))}", soft_wrap=True)


@app.command("get")
def get_state(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The state's name.")],
    workflow_id: RunOpt = None,
    workflow_type: TypeOpt = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """One value (null when it was never written)."""
    owner = _owner(workflow_id, workflow_type)

    async def action(engine: Engine) -> Any:
        return await engine.state.get(name, **owner)

    value = run(_read(db, action))
    if as_json:
        render.print_json({"name": name, "owner": owner, "value": value})
    else:
        render.console().print(escape(render.value_text(value)), soft_wrap=True)


@app.command("lock")
def show_lock(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The lock's name (ctx.lock).")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """A durable lock: its permits, holders and waiters (FIFO) with their lease expiry."""

    async def action(engine: Engine) -> dict[str, Any]:
        return await engine.inspect_lock(name)

    found: dict[str, Any] = run(_read(db, action))
    if as_json:
        render.print_json(found)
        return
    out = render.console()
    out.print(f"lock {escape(name)}: {found['permits']} permit(s)")
    for role in ("holders", "waiters"):
        for n, entry in enumerate(found[role], 1):
            out.print(f"  {role[:-1]} {n}: {escape(entry['workflow_id'])}")
