"""``pyweft workflows purge``: delete finished runs for good, after showing what would go.

Deleting is irreversible, so the command counts first and asks. ``--dry-run``
only counts; ``--yes`` skips the question (scripts, cron). Without a terminal
to ask on and without ``--yes`` it refuses rather than guess. Running runs are
never touched: ``Engine.purge`` deletes finished ones only.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.markup import escape

from pyweft import WorkflowInfo
from pyweft.cli import DbOption, JsonOption, bad_parameter, filters, render, run
from pyweft.cli.filters import (
    AttrOption,
    IdPrefixOption,
    ParentOption,
    RunFilters,
    SinceOption,
    StatusOption,
    TagOption,
    TypeOption,
    UntilOption,
    UpdatedSinceOption,
    UpdatedUntilOption,
)
from pyweft.cli.store import open_engine

_SHOWN = 10  # ids listed before asking


async def _matching(db: str | None, flt: RunFilters) -> list[WorkflowInfo]:
    """The finished runs the filters match (what ``Engine.purge`` would delete now)."""
    found: list[WorkflowInfo] = []
    cursor: str | None = None
    async with open_engine(db) as engine:
        while True:
            page = await engine.list(**flt.as_kwargs(), limit=1000, cursor=cursor)
            found += [info for info in page.items if info.is_terminal]
            if (cursor := page.next_cursor) is None:
                return found


async def _purge(db: str | None, flt: RunFilters) -> int:
    async with open_engine(db) as engine:
        return await engine.purge(**flt.as_kwargs())


def purge_runs(
    db: DbOption = None,
    status: StatusOption = None,
    workflow_type: TypeOption = None,
    id_prefix: IdPrefixOption = None,
    parent: ParentOption = None,
    attrs: AttrOption = None,
    tags: TagOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    updated_since: UpdatedSinceOption = None,
    updated_until: UpdatedUntilOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only count and list what would be deleted.")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Delete without asking (for scripts).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Permanently delete finished runs matching every filter given (running ones stay).

    Shows how many runs match and asks before deleting; --dry-run only shows,
    --yes deletes without asking. Idempotency keys of purged runs stay spent.
    """
    flt = filters.run_filters(
        status=status,
        workflow_type=workflow_type,
        id_prefix=id_prefix,
        parent=parent,
        attrs=attrs,
        tags=tags,
        since=since,
        until=until,
        updated_since=updated_since,
        updated_until=updated_until,
    )
    if not dry_run and not yes and not sys.stdin.isatty():
        bad_parameter(
            "purge deletes runs for good and there is no terminal to confirm on; pass --yes "
            "to delete, or --dry-run to see what would be deleted"
        )
    matching = run(_matching(db, flt))
    if dry_run or not matching:
        _report(matching, as_json, deleted=None)
        return
    if not yes:
        _report(matching, as_json=False, deleted=None)
        if not typer.confirm(f"Delete these {len(matching)} run(s) for good?", default=False):
            render.console().print("nothing deleted")
            raise typer.Exit(1)
    deleted = run(_purge(db, flt))
    _report(matching, as_json, deleted=deleted)


def _report(matching: list[WorkflowInfo], as_json: bool, *, deleted: int | None) -> None:
    if as_json:
        payload: dict[str, object] = {"matching": [i.id for i in matching]}
        if deleted is not None:
            payload["deleted"] = deleted
        render.print_json(payload)
        return
    out = render.console()
    if deleted is not None:
        out.print(f"purged {deleted} finished run(s)")
        return
    if not matching:
        out.print("no finished runs match: nothing to delete")
        return
    out.print(f"{len(matching)} finished run(s) match:")
    for info in matching[:_SHOWN]:
        out.print(f"  {escape(info.id)}  {escape(info.workflow_type)}  {info.status}")
    if len(matching) > _SHOWN:
        out.print(f"  … and {len(matching) - _SHOWN} more")


__all__ = ["purge_runs"]
