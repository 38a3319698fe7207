"""``pyweft workflows fork``: create a run from another run's history, for an engine to drive.

The CLI stores the fork with ``Engine.fork(..., drive=False)``: nothing runs in
this short-lived command. A running engine that registers the workflow type
picks the new run up within its poll interval (it leaves a wake-up), and any
engine that starts later recovers it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer
from rich.markup import escape

from pyweft import PyweftError, WorkflowInfo, WorkflowNotRegisteredError
from pyweft.cli import DbOption, JsonOption, apps, render, run
from pyweft.cli.apps import AppOption
from pyweft.cli.runs import IdArgument
from pyweft.cli.store import open_engine


async def _fork(
    db: str | None, workflow_id: str, from_step: int | None, new_id: str | None, app: str | None
) -> WorkflowInfo:
    workflows = apps.load_workflows(app) if app is not None else []
    async with open_engine(db, workflows=workflows) as engine:
        if app is not None:
            source = await engine.describe(workflow_id)
            if source.workflow_type not in engine.workflow_types:
                raise WorkflowNotRegisteredError(
                    f"workflow {source.workflow_type!r} is not registered here",
                    workflow_type=source.workflow_type,
                )
        handle = await engine.fork(workflow_id, from_step=from_step, id=new_id, drive=False)
        return await engine.describe(handle.id)


def _explain(app: str | None) -> Callable[[PyweftError], None]:
    def explain(exc: PyweftError) -> None:
        if not isinstance(exc, WorkflowNotRegisteredError):
            return
        render.hint(f"--app {app} defines no workflow named {exc.workflow_type!r}")

    return explain


def fork_run(
    workflow_id: IdArgument,
    from_step: Annotated[
        int | None,
        typer.Option(
            "--from-step",
            metavar="N",
            help="Copy the source's steps 1..N (default: every committed step).",
        ),
    ] = None,
    new_id: Annotated[
        str | None,
        typer.Option("--id", metavar="NEW_ID", help="The new run's id (default: a random UUID)."),
    ] = None,
    app: AppOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a new run of ID's workflow that reuses ID's first N steps, and print its id.

    The new run gets the source's arguments, tags and search attributes and
    its recorded steps 1..N; its code replays those and continues from there.
    Its version is the one --app registers (checked to define the type), or
    the source's without --app.

    This command drives nothing. The new run is stored as running with a
    wake-up: a running engine that registers its workflow type (and recovers
    runs) picks it up within its poll interval, and an engine that starts
    later recovers it.
    """
    info = run(_fork(db, workflow_id, from_step, new_id, app), on_error=_explain(app))
    if as_json:
        render.print_json(render.info_dict(info))
        return
    render.console().print(
        f"forked {escape(workflow_id)} at step {info.forked_at_step} as {escape(info.id)} "
        f"({escape(info.workflow_type)} version {escape(info.version)}). An engine that "
        f"registers {escape(repr(info.workflow_type))} picks it up",
        soft_wrap=True,
    )


__all__ = ["fork_run"]
