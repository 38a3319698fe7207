"""``pyweft workflows list|show|count``: read runs from a store, never change them."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from pyweft import CodeDrift, CorruptRecordError, Group, History, Page, WorkflowInfo
from pyweft.cli import DbOption, JsonOption, filters, render, run
from pyweft.cli.filters import (
    AttrOption,
    CategoryOption,
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
from pyweft.cli.remote import ServerOption, Target, TokenOption, open_target, target
from pyweft.cli.render import escape

IdArgument = Annotated[str, typer.Argument(metavar="ID", help="The workflow run id.")]
ByOption = Annotated[
    str,
    typer.Option(
        "--by",
        metavar="status|type|failure_category|attr:NAME",
        help="Count runs per status, type, failure category or attribute.",
    ),
]


async def _list(db: Target, flt: RunFilters, limit: int, cursor: str | None) -> Page[WorkflowInfo]:
    async with open_target(db, read_only=True) as engine:
        return await engine.list(**flt.as_kwargs(), limit=limit, cursor=cursor)


def list_runs(
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
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
    category: CategoryOption = None,
    limit: Annotated[int, typer.Option("--limit", help="Runs per page (1-1000).")] = 50,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Continue from a previous page's cursor.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List runs matching every filter given, newest first."""
    where = target(db, server, token)
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
        category=category,
    )
    page = run(_list(where, flt, limit, cursor))
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


async def _count(db: Target, by: str, flt: RunFilters) -> list[Group]:
    async with open_target(db, read_only=True) as engine:
        return await engine.aggregate(group_by=by, **flt.as_kwargs())


def count_runs(
    by: ByOption = "status",
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
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
    category: CategoryOption = None,
    as_json: JsonOption = False,
) -> None:
    """Count runs matching the filters (as for list) per status, type or attribute value.

    Largest groups first. With --by attr:NAME, runs without the attribute
    are not counted, and a run whose attribute is a list counts once under
    each of its values.
    """
    where = target(db, server, token)
    group_by = filters.group_by(by)
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
        category=category,
    )
    groups = run(_count(where, group_by, flt))
    if as_json:
        render.print_json({"by": group_by, "groups": [render.group_dict(g) for g in groups]})
    elif not groups:
        render.console().print("no workflow runs match")
    else:
        render.console().print(render.groups_table(groups, group_by))


async def _show(db: Target, workflow_id: str) -> tuple[WorkflowInfo, History | None]:
    async with open_target(db, read_only=True) as engine:
        info = await engine.describe(workflow_id)
        try:
            return info, await engine.history(workflow_id)
        except CorruptRecordError:
            if not info.quarantined:
                raise  # damaged between the two reads: the error names the key
            return info, None  # the summary already says which record is damaged


def show_run(
    workflow_id: IdArgument,
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one run: its state, result or error, every step, and its events in order.

    A quarantined run (a record of it cannot be decoded) shows its summary
    and the damaged key; its steps cannot be shown until the record is repaired.
    """
    where = target(db, server, token)
    info, history = run(_show(where, workflow_id))
    if as_json:
        render.print_json(
            {
                **render.info_dict(info),
                "attributes": info.attributes or {},
                "steps": None if history is None else [render.step_dict(s) for s in history.steps],
                "events": None
                if history is None
                else [render.event_dict(e) for e in history.events],
            }
        )
        return
    out = render.console()
    out.print(_summary(info))
    out.print()
    if info.drift is not None:
        out.print(_drift_table(info.drift))
        out.print()
    if history is None:
        out.print(
            "steps and events cannot be shown: a record of this run is damaged. "
            "`pyweft doctor` lists every damaged key",
            soft_wrap=True,
        )
        return
    steps = history.steps
    out.print(render.steps_table(steps, info.created_at) if steps else "no steps recorded yet")
    out.print()
    out.print("[bold]events[/]")
    out.print(render.events_table(history.events, info.created_at))


def _drift_table(drift: CodeDrift) -> Table:
    """The code drift side by side: what the journal recorded, what the code asks now."""
    where = f"step {drift.step}" if drift.step is not None else "the run's versions"
    table = Table(title=f"code drift at {where} ({drift.reason})", title_justify="left")
    table.add_column("")
    table.add_column("journal recorded", overflow="fold")
    table.add_column("code now asks for", overflow="fold")
    for label, field in (
        ("kind", "kind"),
        ("name", "name"),
        ("args", "args"),
        ("detail", "detail"),
    ):
        old, new = getattr(drift.recorded, field), getattr(drift.requested, field)
        table.add_row(
            label, escape(old if old is not None else "—"), escape(new if new is not None else "—")
        )
    return table


def _summary(info: WorkflowInfo) -> Table:
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column(overflow="fold")
    summary.add_row("id", escape(info.id))
    summary.add_row("status", render.status_text(info.status))
    summary.add_row("type", f"{escape(info.workflow_type)} (version {escape(info.version)})")
    summary.add_row("created", render.when(info.created_at))
    summary.add_row("updated", render.when(info.updated_at))
    if info.parent_id is not None:
        summary.add_row("parent", escape(info.parent_id))
    if info.forked_from is not None:
        summary.add_row("forked", escape(f"from {info.forked_from} at step {info.forked_at_step}"))
    if info.tags:
        summary.add_row("tags", escape(", ".join(info.tags)))
    for name, value in sorted((info.attributes or {}).items()):
        summary.add_row(f"attr {escape(name)}", escape(render.value_text(value)))
    if info.status == "completed":
        summary.add_row("result", escape(render.value_text(info.result)))
    if info.corrupt_key is not None:
        summary.add_row("damaged", escape(info.corrupt_key))
    if info.failure_category is not None:
        summary.add_row("category", escape(info.failure_category))
    if info.error is not None:
        summary.add_row("error", escape(f"{info.error.type}: {info.error.message}"))
    if info.cancel_requested and info.status != "cancelled":
        summary.add_row("cancel", "requested")
    return summary


__all__ = ["IdArgument", "count_runs", "list_runs", "show_run"]
