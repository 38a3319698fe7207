"""``pyweft versions check``: is it safe to deploy this code on this store?

An unfinished run (running, pending or suspended) replays its journal with
the code registered for its type when an engine recovers it. If its stored
version differs from the registered one, recovery fails the run with
``VersionMismatchError`` (or refuses to open, with ``version_mismatch=
"raise"``); if its type is not registered at all, nobody drives it. The
check compares the two before the deploy.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import typer
from rich.markup import escape
from rich.table import Table

from pyweft.cli import DbOption, JsonOption, apps, bad_parameter, render, run
from pyweft.cli.apps import AppOption
from pyweft.cli.store import open_engine

UNFINISHED = ["running", "pending", "suspended"]
_PAGE = 1000

app = typer.Typer(
    help="Compare the workflow versions your code registers with the runs a store holds.",
    no_args_is_help=True,
    add_completion=False,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class TypeCheck:
    """One workflow type: its registered version and its unfinished runs per stored version."""

    workflow_type: str
    registered_version: str | None
    unfinished: dict[str, int]

    @property
    def unsafe_runs(self) -> int:
        return sum(n for v, n in self.unfinished.items() if v != self.registered_version)

    def as_dict(self) -> dict[str, object]:
        return {
            "workflow_type": self.workflow_type,
            "registered_version": self.registered_version,
            "unfinished": self.unfinished,
            "unsafe_runs": self.unsafe_runs,
            "safe": self.unsafe_runs == 0,
        }


async def _unfinished(db: str | None) -> dict[str, Counter[str]]:
    """``{type: Counter(version)}`` of every unfinished run, in one pass over the listing."""
    found: dict[str, Counter[str]] = {}
    async with open_engine(db, read_only=True) as engine:
        cursor: str | None = None
        while True:
            page = await engine.list(status=UNFINISHED, limit=_PAGE, cursor=cursor)
            for info in page.items:
                found.setdefault(info.workflow_type, Counter())[info.version] += 1
            if (cursor := page.next_cursor) is None:
                return found


def compare(registered: dict[str, str], unfinished: dict[str, Counter[str]]) -> list[TypeCheck]:
    return [
        TypeCheck(
            workflow_type=name,
            registered_version=registered.get(name),
            unfinished=dict(sorted(unfinished.get(name, Counter()).items())),
        )
        for name in sorted(set(registered) | set(unfinished))
    ]


def _verdict(check: TypeCheck) -> str:
    if check.registered_version is None:
        return f"[red]unsafe[/]: {check.unsafe_runs} unfinished, type not registered"
    if check.unsafe_runs:
        stale = [v for v in check.unfinished if v != check.registered_version]
        versions = ", ".join(escape(v) for v in stale)
        return f"[red]unsafe[/]: {check.unsafe_runs} unfinished on version {versions}"
    return "[green]ok[/]"


def _table(checks: list[TypeCheck]) -> Table:
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("workflow type", overflow="fold")
    table.add_column("registered", no_wrap=True)
    table.add_column("unfinished runs by version", overflow="fold")
    table.add_column("verdict", overflow="fold")
    for check in checks:
        stored = ", ".join(f"{escape(v)}: {n}" for v, n in check.unfinished.items())
        table.add_row(
            escape(check.workflow_type),
            escape(check.registered_version or "-"),
            stored or "none",
            _verdict(check),
        )
    return table


@app.command("check")
def check_versions(
    app_module: AppOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Check that every unfinished run can be recovered by the workflows in --app.

    Lists, per workflow type, the version --app registers and the stored
    versions of its running, pending and suspended runs. Exits 0 when every
    unfinished run's version equals its type's registered version, and 1
    ("unsafe") when some run's version differs or its type is not registered
    by --app: an engine with this code would fail such runs on recovery
    (VersionMismatchError) or leave them undriven.
    """
    if app_module is None:
        bad_parameter("versions check needs --app MODULE, the module that defines your workflows")
    registered = apps.workflow_versions(app_module)
    checks = compare(registered, run(_unfinished(db)))
    unsafe = [c for c in checks if c.unsafe_runs]
    total = sum(c.unsafe_runs for c in unsafe)
    if as_json:
        render.print_json(
            {
                "app": app_module,
                "safe": not unsafe,
                "unsafe_runs": total,
                "types": [c.as_dict() for c in checks],
            }
        )
    else:
        out = render.console()
        out.print(_table(checks))
        if unsafe:
            names = ", ".join(escape(c.workflow_type) for c in unsafe)
            out.print(
                f"[red]unsafe[/]: {total} unfinished run(s) of {names} do not match the "
                f"versions {escape(app_module)} registers",
                soft_wrap=True,
            )
        else:
            out.print(
                f"[green]safe[/]: every unfinished run matches the version {escape(app_module)} "
                "registers for its type",
                soft_wrap=True,
            )
    if unsafe:
        raise typer.Exit(1)


__all__ = ["UNFINISHED", "TypeCheck", "app", "check_versions", "compare"]
