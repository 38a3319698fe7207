"""``pyweft versions check``: is it safe to deploy this code on this store?

An unfinished run (running, pending, suspended or blocked) replays its
journal with the code registered for its type when an engine recovers it. If
its stored version differs from the registered one, an engine with this code
cannot replay it: it never claims it, and blocks it (or fails it, or refuses
to open, per ``version_mismatch``) unless an engine with the old version
drives it; if its type is not registered at all, nobody with this code drives
it. The check compares the two before the deploy, and lists the runs already
blocked (their code drifted) that wait for a fix.
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

UNFINISHED = ["running", "pending", "enqueued", "suspended", "blocked"]
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
    blocked: int = 0
    """Unfinished runs already blocked: their code drifted, they wait for a fix."""

    @property
    def unsafe_runs(self) -> int:
        return sum(n for v, n in self.unfinished.items() if v != self.registered_version)

    def as_dict(self) -> dict[str, object]:
        return {
            "workflow_type": self.workflow_type,
            "registered_version": self.registered_version,
            "unfinished": self.unfinished,
            "unsafe_runs": self.unsafe_runs,
            "blocked": self.blocked,
            "safe": self.unsafe_runs == 0,
        }


async def _unfinished(db: str | None) -> tuple[dict[str, Counter[str]], Counter[str]]:
    """``{type: Counter(version)}`` of every unfinished run and the blocked ones per type,
    in one pass over the listing."""
    found: dict[str, Counter[str]] = {}
    blocked: Counter[str] = Counter()
    async with open_engine(db, read_only=True) as engine:
        cursor: str | None = None
        while True:
            page = await engine.list(status=UNFINISHED, limit=_PAGE, cursor=cursor)
            for info in page.items:
                found.setdefault(info.workflow_type, Counter())[info.version] += 1
                if info.status == "blocked":
                    blocked[info.workflow_type] += 1
            if (cursor := page.next_cursor) is None:
                return found, blocked


def compare(
    registered: dict[str, str],
    unfinished: dict[str, Counter[str]],
    blocked: Counter[str] | None = None,
) -> list[TypeCheck]:
    return [
        TypeCheck(
            workflow_type=name,
            registered_version=registered.get(name),
            unfinished=dict(sorted(unfinished.get(name, Counter()).items())),
            blocked=(blocked or Counter())[name],
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
    if check.blocked:
        return f"[magenta]blocked[/]: {check.blocked} wait for code that replays them"
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
    versions of its running, pending, suspended and blocked runs. Exits 0
    when every unfinished run's version equals its type's registered version,
    and 1 ("unsafe") when some run's version differs or its type is not
    registered by --app: an engine with this code cannot replay such runs, so
    they wait (blocked) for an engine with their version. Runs already
    blocked by code drift are counted too: after the fix is deployed, engines
    resume them; `pyweft workflows fail ID --reason ...` ends one for good.
    """
    if app_module is None:
        bad_parameter("versions check needs --app MODULE, the module that defines your workflows")
    registered = apps.workflow_versions(app_module)
    found, blocked = run(_unfinished(db))
    checks = compare(registered, found, blocked)
    unsafe = [c for c in checks if c.unsafe_runs]
    total = sum(c.unsafe_runs for c in unsafe)
    if as_json:
        render.print_json(
            {
                "app": app_module,
                "safe": not unsafe,
                "unsafe_runs": total,
                "blocked_runs": sum(c.blocked for c in checks),
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
        if stuck := sum(c.blocked for c in checks):
            out.print(
                f"[magenta]blocked[/]: {stuck} run(s) wait for code that replays them "
                "(`pyweft workflows list --status blocked`); engines with the fix resume "
                "them, or `pyweft workflows fail ID --reason TEXT` ends one",
                soft_wrap=True,
            )
    if unsafe:
        raise typer.Exit(1)


__all__ = ["UNFINISHED", "TypeCheck", "app", "check_versions", "compare"]
