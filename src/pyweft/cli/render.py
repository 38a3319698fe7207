"""Output for people (rich tables, one-line errors) and for tools (JSON).

JSON goes straight to stdout, never through rich, so that no terminal width
or markup can reflow or colour it. Errors go to stderr on one line.

Everything printed for people that came from the store (ids, names, payload
previews, error messages) goes through :func:`escape`: rich markup is
escaped, and control characters, lone surrogates and bidi overrides are shown
as ``\x1b``-style escapes, so a stored id cannot clear or rewrite the
terminal. Stored times too far out for a calendar print as ``invalid time``.
"""

from __future__ import annotations

import dataclasses
import sys
from datetime import datetime
from typing import Any

import msgspec
from rich.console import Console
from rich.markup import escape as escape_markup
from rich.table import Table

from pyweft import ErrorInfo, Group, HistoryEvent, ReviewInfo, StepInfo, WorkflowInfo

STATUS_STYLES = {
    "completed": "green",
    "running": "cyan",
    "open": "cyan",
    "failed": "red",
    "timed_out": "red",
    "cancelled": "yellow",
    "suspended": "yellow",
    "blocked": "bold magenta",
    "pending": "cyan",
    "enqueued": "cyan",
    "approved": "green",
    "rejected": "red",
    "needs_changes": "yellow",
    "expired": "red",
    "step_completed": "green",
    "step_failed": "red",
    "step_open": "cyan",
    "quarantined": "bold red",
}


def clean(text: str) -> str:
    """``text`` with every character that is not printable shown as its escape (``\x1b``)."""
    if text.isprintable():
        return text
    return "".join(
        ch
        if ch.isprintable() or ch == " "
        else ch.encode("unicode_escape", "backslashreplace").decode("ascii")
        for ch in text
    )


def escape(text: str) -> str:
    """Text for a rich console: control characters made visible, markup escaped."""
    return escape_markup(clean(text))


def console() -> Console:
    """A console for stdout, created per command so test runners can swap the stream."""
    # emoji=False: a stored id such as "ix:a:b" must not print as "ix🅰b".
    return Console(highlight=False, emoji=False)


def error(code: str, message: str) -> None:
    """Print ``error: Code: message`` in red on one line of stderr."""
    line = " ".join(message.split())
    Console(stderr=True, highlight=False, soft_wrap=True, emoji=False).print(
        f"[bold red]error:[/] [red]{escape(code)}: {escape(line)}[/]"
    )


def hint(message: str) -> None:
    """Print what to do next on one plain line of stderr (after an :func:`error`)."""
    Console(stderr=True, highlight=False, soft_wrap=True, emoji=False).print(
        escape(" ".join(message.split()))
    )


# --- JSON ---------------------------------------------------------------------------


def _json_fallback(value: object) -> object:
    if isinstance(value, ErrorInfo):
        return error_dict(value)
    return repr(value)  # anything else stays readable rather than crashing the listing


def to_json(data: object) -> str:
    """Encode ``data`` as indented JSON (datetimes as ISO-8601 strings)."""
    raw = msgspec.json.encode(data, enc_hook=_json_fallback)
    return msgspec.json.format(raw, indent=2).decode()


def print_json(data: object) -> None:
    sys.stdout.write(to_json(data) + "\n")
    sys.stdout.flush()


def error_dict(err: ErrorInfo | None) -> dict[str, Any] | None:
    if err is None:
        return None
    return {"type": err.type, "message": err.message, "code": err.code}


def info_dict(info: WorkflowInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "workflow_type": info.workflow_type,
        "version": info.version,
        "status": info.status,
        "created_at": info.created_at,
        "updated_at": info.updated_at,
        "step_count": info.step_count,
        "result": info.result,
        "error": error_dict(info.error),
        "failure_category": info.failure_category,
        "cancel_requested": info.cancel_requested,
        "parent_id": info.parent_id,
        "tags": info.tags,
        "forked_from": info.forked_from,
        "forked_at_step": info.forked_at_step,
        "quarantined": info.quarantined,
        "corrupt_key": info.corrupt_key,
        "drift": None if info.drift is None else dataclasses.asdict(info.drift),
    }


def group_dict(group: Group) -> dict[str, Any]:
    return {"key": group.key, "count": group.count}


def step_dict(step: StepInfo) -> dict[str, Any]:
    return {
        "step": step.step,
        "kind": step.kind,
        "name": step.name,
        "status": step.status,
        "attempts": step.attempts,
        "started_at": step.started_at,
        "finished_at": step.finished_at,
        "duration_ms": duration_ms(step),
        "result": step.result,
        "error": error_dict(step.error),
        "next_attempt_at": step.next_attempt_at,
    }


def event_dict(event: HistoryEvent) -> dict[str, Any]:
    return {"at": event.at, "kind": event.kind, "step": event.step, "detail": event.detail}


def review_dict(review: ReviewInfo) -> dict[str, Any]:
    return {
        "review_id": review.review_id,
        "workflow_id": review.workflow_id,
        "workflow_type": review.workflow_type,
        "review_type": review.review_type,
        "status": review.status,
        "reviewers": review.reviewers,
        "artifact": review.artifact,
        "created_at": review.created_at,
        "deadline": review.deadline,
        "reviewer": review.reviewer,
        "feedback": review.feedback,
        "decided_at": review.decided_at,
    }


# --- tables -------------------------------------------------------------------------


INVALID_TIME = "invalid time"


def _out_of_range(moment: datetime) -> bool:
    # The engine reports a stored time no calendar holds (inf, nan, 1e300) as a day at
    # the very edge of datetime's range; nothing real happens in year 1 or 9999.
    return moment.year <= 1 or moment.year >= 9999


def when(moment: datetime | None) -> str:
    """A timestamp in the viewer's local time, to the second."""
    if moment is None:
        return ""
    if _out_of_range(moment):
        return INVALID_TIME
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def clock_time(moment: datetime, day: datetime) -> str:
    """Time of day, with the date only when it differs from ``day``'s."""
    if _out_of_range(moment):
        return INVALID_TIME
    if _out_of_range(day):
        return when(moment)
    local = moment.astimezone()
    text = local.strftime("%H:%M:%S")
    if local.date() != day.astimezone().date():
        text = f"{local:%Y-%m-%d} {text}"
    return text


def duration_ms(step: StepInfo) -> float | None:
    seconds = step.duration_s
    return None if seconds is None else round(seconds * 1000, 1)


def status_text(status: str) -> str:
    style = STATUS_STYLES.get(status)
    return f"[{style}]{escape(status)}[/]" if style else escape(status)


def runs_table(items: list[WorkflowInfo]) -> Table:
    """Runs, one per row; parent and tags columns appear only when some run has them."""
    parents = any(info.parent_id is not None for info in items)
    tags = any(info.tags for info in items)
    categories = any(info.failure_category is not None for info in items)
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("id", overflow="fold")
    table.add_column("type", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("created", no_wrap=True)
    table.add_column("updated", no_wrap=True)
    if categories:
        table.add_column("category", no_wrap=True)
    if parents:
        table.add_column("parent", overflow="fold")
    if tags:
        table.add_column("tags", overflow="fold")
    for info in items:
        cells = [
            escape(info.id),
            escape(info.workflow_type),
            status_text(info.status),
            when(info.created_at),
            clock_time(info.updated_at, info.created_at),
        ]
        if categories:
            cells.append(escape(info.failure_category or ""))
        if parents:
            cells.append(escape(info.parent_id or ""))
        if tags:
            cells.append(escape(", ".join(info.tags)))
        table.add_row(*cells)
    return table


def group_key_text(key: object) -> str:
    """A group's key: text as it is, other values (numbers, booleans, times) as JSON."""
    return key if isinstance(key, str) else value_text(key)


def groups_table(groups: list[Group], by: str) -> Table:
    """``workflows count``: one row per group, largest first."""
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column(escape(by), overflow="fold")
    table.add_column("count", justify="right", no_wrap=True)
    for group in groups:
        key = group_key_text(group.key)
        table.add_row(status_text(key) if by == "status" else escape(key), str(group.count))
    return table


def _note(step: StepInfo, day: datetime) -> str:
    if step.error is not None:
        return f"{step.error.type}: {step.error.message}"
    if step.status == "open" and step.next_attempt_at is not None:
        what = "wakes" if step.kind == "sleep" else "next attempt"
        return f"{what} at {clock_time(step.next_attempt_at, day)}"
    return ""


def steps_table(steps: list[StepInfo], day: datetime) -> Table:
    """A run's history; times show the date only when it is not ``day`` (the run's start)."""
    notes = [_note(step, day) for step in steps]
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("name", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("attempts", justify="right", no_wrap=True)
    table.add_column("started", no_wrap=True)
    table.add_column("duration", justify="right", no_wrap=True)
    if any(notes):
        table.add_column("note", overflow="fold")
    for step, note in zip(steps, notes, strict=True):
        ms = duration_ms(step)
        cells = [
            str(step.step),
            escape(step.kind),
            escape(step.name),
            status_text(step.status),
            str(step.attempts),
            clock_time(step.started_at, day),
            "" if ms is None else f"{ms:,.1f} ms",
        ]
        table.add_row(*cells, *([escape(note)] if any(notes) else []))
    return table


def value_text(value: object) -> str:
    """A result value on one line, as compact JSON."""
    return msgspec.json.encode(value, enc_hook=_json_fallback).decode()


def events_table(events: list[HistoryEvent], day: datetime) -> Table:
    """A run's events in order; times show the date only when it is not ``day``."""
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("at", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for event in events:
        table.add_row(
            clock_time(event.at, day),
            status_text(event.kind),
            "" if event.step is None else str(event.step),
            escape(event.detail),
        )
    return table


def short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def reviews_table(reviews: list[ReviewInfo]) -> Table:
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("review id", no_wrap=True)
    table.add_column("workflow", overflow="fold")
    table.add_column("type", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("reviewers", overflow="fold")
    table.add_column("requested", no_wrap=True)
    table.add_column("decided", overflow="fold")
    table.add_column("artifact", overflow="fold")
    for review in reviews:
        decided = ""
        if review.decided_at is not None:
            decided = clock_time(review.decided_at, review.created_at)
            decided += f" by {review.reviewer}" if review.reviewer else ""
        elif review.deadline is not None:
            decided = f"due {clock_time(review.deadline, review.created_at)}"
        table.add_row(
            escape(review.review_id),
            escape(review.workflow_id),
            escape(review.review_type),
            status_text(review.status),
            escape(", ".join(review.reviewers)),
            when(review.created_at),
            escape(decided),
            escape(short(value_text(review.artifact))),
        )
    return table
