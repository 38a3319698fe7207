"""``pyweft workflows bulk OPERATION``: cancel, signal, retry failed or delete runs by filter.

Two steps, as in the engine: without ``--confirm`` the command is a dry run that
prints how many runs match, a sample and a confirmation token; run it again with
the same filters and ``--confirm TOKEN`` to apply it (the token is single-use and
valid ten minutes). ``--yes`` does both at once, for scripts.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer

from pyweft.cli import DbOption, JsonOption, bad_parameter, filters, json_argument, render, run
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

_OPERATIONS = {
    "cancel": "cancel",
    "signal": "signal",
    "retry-failed": "retry_failed",
    "delete": "delete",
}


async def _bulk(
    db: str | None,
    operation: str,
    flt: RunFilters,
    signal: tuple[str, Any] | None,
    token: str | None,
    yes: bool,
) -> tuple[Any, Any]:
    async with open_engine(db) as engine:
        preview = None
        if token is None:
            preview = await engine.bulk_preview(operation, signal=signal, **flt.as_kwargs())
            if not yes or preview.matched == 0:
                return preview, None
            token = preview.confirmation_token
        result = await engine.bulk_commit(
            operation, confirmation_token=token, signal=signal, actor="cli", **flt.as_kwargs()
        )
        return preview, result


def bulk_runs(
    operation: Annotated[str, typer.Argument(help="cancel, signal, retry-failed or delete")],
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
    signal_name: Annotated[
        str | None, typer.Option("--signal", help="The signal to send (operation 'signal').")
    ] = None,
    payload: Annotated[
        str | None, typer.Option("--payload", help="The signal's payload, as JSON.")
    ] = None,
    confirm: Annotated[
        str | None,
        typer.Option("--confirm", help="The token a dry run printed: apply the operation."),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Dry run and apply at once (for scripts).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Apply one operation to every run matching the filters, after a dry run.

    The filters must scope the operation (a status, type, tag, attribute or an id
    prefix of 3+ characters). Without --confirm it only counts and prints a token;
    repeat the command with the same filters and --confirm TOKEN to apply it.
    """
    op = _OPERATIONS.get(operation)
    if op is None:
        bad_parameter(f"unknown bulk operation {operation!r}; use one of {', '.join(_OPERATIONS)}")
    signal = None
    if op == "signal":
        if signal_name is None:
            bad_parameter("bulk signal needs --signal NAME (and --payload JSON if any)")
        signal = (signal_name, json_argument(payload, "--payload") if payload else None)
    elif signal_name is not None or payload is not None:
        bad_parameter("--signal and --payload apply to the 'signal' operation only")
    if confirm is not None and yes:
        bad_parameter("pass either --confirm TOKEN or --yes, not both")
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
    preview, result = run(_bulk(db, op, flt, signal, confirm, yes))
    if as_json:
        out: dict[str, Any] = {}
        if preview is not None:
            out["preview"] = dataclasses.asdict(preview)
        if result is not None:
            out["result"] = dataclasses.asdict(result)
        render.print_json(out)
        return
    console = render.console()
    if preview is not None:
        console.print(f"{preview.matched} run(s) match; e.g. {', '.join(preview.sample) or '-'}")
        if result is None and preview.matched:
            console.print(
                f"apply with: --confirm {preview.confirmation_token} (same filters; valid until "
                f"{preview.expires_at:%H:%M:%S} UTC)"
            )
    if result is not None:
        console.print(
            f"{operation}: {result.applied} applied, {result.skipped} skipped, "
            f"{len(result.failed)} failed (audit {result.audit_id})"
        )
        for workflow_id, error in result.failed.items():
            console.print(f"  failed {workflow_id}: {error}")
        if result.created:
            console.print(f"  new runs: {', '.join(result.created)}")
        if result.failed:
            raise typer.Exit(1)
