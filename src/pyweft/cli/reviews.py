"""``pyweft reviews list|decide``: the human side of ``ctx.review`` steps.

A decision is written to the store before ``decide`` returns; the engine
process that drives the waiting run sees it when it next polls the store.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer
from rich.markup import escape

from pyweft import ReviewInfo
from pyweft.cli import DbOption, JsonOption, render, run
from pyweft.cli.remote import ServerOption, Target, TokenOption, open_target, target

app = typer.Typer(
    help="List reviews that workflows wait on, and decide them.",
    no_args_is_help=True,
    add_completion=False,
)


class StatusFilter(StrEnum):
    pending = "pending"
    approved = "approved"
    rejected = "rejected"
    needs_changes = "needs_changes"
    expired = "expired"
    withdrawn = "withdrawn"  # a race's losing branch, or a run that ended while it waited
    all = "all"


class Decision(StrEnum):
    approved = "approved"
    rejected = "rejected"
    needs_changes = "needs_changes"


async def _list(
    db: Target, status: StatusFilter, workflow_id: str | None, review_type: str | None
) -> list[ReviewInfo]:
    async with open_target(db, read_only=True) as engine:
        return await engine.list_reviews(
            status=None if status is StatusFilter.all else status.value,
            workflow_id=workflow_id,
            review_type=review_type,
        )


async def _decide(
    db: Target, review_id: str, decision: Decision, reviewer: str, feedback: str | None
) -> None:
    async with open_target(db) as engine:
        await engine.submit_review(review_id, decision.value, reviewer=reviewer, feedback=feedback)


@app.command("list")
def list_reviews(
    status: Annotated[
        StatusFilter, typer.Option("--status", help="Only reviews in this state.")
    ] = StatusFilter.pending,
    workflow_id: Annotated[
        str | None, typer.Option("--workflow", metavar="ID", help="Only this run's reviews.")
    ] = None,
    review_type: Annotated[
        str | None, typer.Option("--type", help="Only reviews of this review_type.")
    ] = None,
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """List reviews, oldest first (pending ones unless --status says otherwise)."""
    where = target(db, server, token)
    reviews = run(_list(where, status, workflow_id, review_type))
    if as_json:
        render.print_json({"items": [render.review_dict(r) for r in reviews]})
        return
    out = render.console()
    if not reviews:
        out.print("no reviews match")
    elif out.width >= _WIDE:
        out.print(render.reviews_table(reviews))
    else:  # eight columns squeezed into a terminal are unreadable: one block per review
        for review in reviews:
            out.print(_review_block(review), soft_wrap=False)


_WIDE = 140  # the table needs about this many columns to keep ids on one line


def _review_block(review: ReviewInfo) -> str:
    head = (
        f"[bold]{escape(review.review_id)}[/]  {render.status_text(review.status)}  "
        f"{escape(review.review_type)}"
    )
    lines = [head, f"  workflow  {escape(review.workflow_id)} ({escape(review.workflow_type)})"]
    if review.reviewers:
        lines.append(f"  reviewers {escape(', '.join(review.reviewers))}")
    lines.append(f"  requested {render.when(review.created_at)}")
    if review.decided_at is not None:
        by = f" by {review.reviewer}" if review.reviewer else ""
        lines.append(f"  decided   {render.when(review.decided_at)}{escape(by)}")
    elif review.deadline is not None:
        lines.append(f"  due       {render.when(review.deadline)}")
    lines.append(f"  artifact  {escape(render.short(render.value_text(review.artifact)))}")
    return "\n".join(lines)


@app.command("decide")
def decide(
    review_id: Annotated[str, typer.Argument(metavar="REVIEW_ID", help="From `reviews list`.")],
    decision: Annotated[Decision, typer.Argument(metavar="DECISION", help="The decision.")],
    reviewer: Annotated[str, typer.Option("--reviewer", metavar="NAME", help="Who decides.")],
    feedback: Annotated[
        str | None, typer.Option("--feedback", metavar="TEXT", help="A note for the workflow.")
    ] = None,
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Decide a pending review: approved, rejected or needs_changes.

    The decision is durable when this returns, and a second decision is
    refused (ReviewAlreadyDecidedError). The engine process that drives the
    waiting run continues it when it next polls the store.
    """
    where = target(db, server, token)
    run(_decide(where, review_id, decision, reviewer, feedback))
    render.console().print(
        f"review {escape(review_id)}: {render.status_text(decision.value)} by {escape(reviewer)}; "
        "the waiting run continues when its engine next polls the store",
        soft_wrap=True,
    )
