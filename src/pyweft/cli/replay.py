"""``pyweft workflows export ID`` and ``pyweft replay FILE --app MODULE``: check new code
against recorded histories before a deploy (see ``pyweft.testing.replay``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from pyweft.cli import DbOption, JsonOption, apps, bad_parameter, render, run
from pyweft.cli.apps import AppOption
from pyweft.cli.store import open_engine
from pyweft.testing.replay import ReplayResult, export_history, replay


async def _export(db: str | None, workflow_ids: list[str]) -> list[dict[str, Any]]:
    async with open_engine(db, read_only=True) as engine:
        return [await export_history(engine, wid) for wid in workflow_ids]


def export_runs(
    workflow_ids: Annotated[
        list[str], typer.Argument(metavar="ID...", help="The runs whose histories to export.")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write to this file instead of stdout.")
    ] = None,
    db: DbOption = None,
) -> None:
    """Export runs' recorded histories as JSON, for `pyweft replay` (one run: an object;
    several: a list)."""
    histories = run(_export(db, workflow_ids))
    data: Any = histories[0] if len(histories) == 1 else histories
    text = json.dumps(data, indent=1) + "\n"
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        render.console().print(f"{len(histories)} history(ies) written to {escape(str(out))}")


async def _replay(histories: list[Any], module: str) -> list[ReplayResult]:
    workflows = apps.load_workflows(module)
    return [await replay(h, workflows) for h in histories]


def replay_histories(
    files: Annotated[
        list[Path], typer.Argument(metavar="FILE...", help="From `pyweft workflows export`.")
    ],
    app_module: AppOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay recorded histories with the workflows in --app; exit 1 if any differs.

    Nothing runs past a history's recorded steps. For each history, prints whether
    the code replays it, or the first step where it differs and how.
    """
    if app_module is None:
        bad_parameter("replay needs --app MODULE, the module that defines your workflows")
    histories: list[Any] = []
    for path in files:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            bad_parameter(f"{path} is not a readable JSON history: {exc}")
        histories += data if isinstance(data, list) else [data]
    results = run(_replay(histories, app_module))
    failed = [r for r in results if not r.ok]
    if as_json:
        render.print_json(
            {
                "ok": not failed,
                "results": [
                    {
                        "workflow_id": r.workflow_id,
                        "workflow_type": r.workflow_type,
                        "ok": r.ok,
                        "recorded_steps": r.recorded_steps,
                        "step": r.step,
                        "error_type": r.error_type,
                        "message": r.message,
                    }
                    for r in results
                ],
            }
        )
    else:
        out = render.console()
        for r in results:
            mark = "[green]ok[/]" if r.ok else "[bold red]DIFFERS[/]"
            out.print(f"{mark} {escape(str(r))}", soft_wrap=True)
        out.print(f"{len(results) - len(failed)} of {len(results)} history(ies) replay cleanly")
    if failed:
        raise typer.Exit(1)
