"""``pyweft workflows ...``: read runs, and send them messages, from a separate process.

This module holds the group and the commands that write to a run; reading
(``list``, ``show``, ``count``) lives in :mod:`pyweft.cli.runs` and ``fork``
in :mod:`pyweft.cli.forks`. The CLI opens its engine with ``recover=False``
and registers no workflow types, so it never drives a run. What it writes (a
signal, an update request, a cancel, a suspension) lands in the store; the
engine process that drives the run picks it up when it next polls the store,
or an engine that recovers the run later does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

import typer

from pyweft import PyweftError, UpdateTimeoutError, WorkflowInfo
from pyweft.cli import DbOption, JsonOption, db_flag, forks, json_argument, render, run, runs
from pyweft.cli.remote import ServerOption, Target, TokenOption, open_target, target
from pyweft.cli.render import escape
from pyweft.cli.runs import IdArgument

app = typer.Typer(
    help="Inspect, count and fork workflow runs in a store, and send them signals, updates "
    "and lifecycle requests. Never drives a run itself.",
    no_args_is_help=True,
    add_completion=False,
)

TimeoutOption = Annotated[
    str, typer.Option("--timeout", help="How long to wait for the answer: 5s, 500ms, 2m, 1h30m.")
]
_JSON_TEXT = (
    "JSON text: '\"text\"', 42, true, null, '{\"qty\": 2}'. Put -- before a negative number."
)


app.command("list")(runs.list_runs)
app.command("show")(runs.show_run)
app.command("count")(runs.count_runs)
app.command("fork")(forks.fork_run)


# --- messages -----------------------------------------------------------------------


async def _signal(
    db: Target, workflow_id: str, name: str, payload: Any, signal_id: str | None
) -> None:
    async with open_target(db) as engine:
        await engine.signal(workflow_id, name, payload, signal_id=signal_id)


@app.command("signal")
def signal_run(
    workflow_id: IdArgument,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The signal's name.")],
    payload: Annotated[
        str | None,
        typer.Argument(metavar="PAYLOAD_JSON", help=f"The payload (default null) as {_JSON_TEXT}"),
    ] = None,
    signal_id: Annotated[
        str | None,
        typer.Option(
            "--signal-id", help="Deduplication id: resending the same (run, NAME, id) is a no-op."
        ),
    ] = None,
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Send a signal. It is stored durably before this returns.

    The engine process that drives the run consumes it at the run's next
    wait_for_signal(NAME) (it polls the store), or an engine that recovers the
    run later does. A finished run refuses signals (WorkflowTerminalError).
    """
    where = target(db, server, token)
    value = None if payload is None else json_argument(payload, "PAYLOAD_JSON")
    run(_signal(where, workflow_id, name, value, signal_id))
    render.console().print(
        f"signal {escape(repr(name))} stored for {escape(workflow_id)}; the engine that drives "
        "the run picks it up when it next polls the store",
        soft_wrap=True,
    )


async def _query(db: Target, workflow_id: str, name: str, args: list[Any], timeout: str) -> Any:
    async with open_target(db) as engine:
        return await engine.query(workflow_id, name, *args, timeout=timeout)


@app.command("query")
def query_run(
    workflow_id: IdArgument,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The query's name.")],
    args: Annotated[
        list[str] | None,
        typer.Argument(metavar="ARGS_JSON...", help=f"Handler arguments, each {_JSON_TEXT}"),
    ] = None,
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    timeout: TimeoutOption = "5s",
    as_json: JsonOption = False,
) -> None:
    """Ask a run a question; its query handler answers from the live run's memory.

    The question goes through the store to the engine process that drives the
    run, which answers when it next polls the store (its poll_interval). If no
    engine answers within --timeout (none is running, or the run is suspended
    or not started yet), the command fails with QueryUnavailableError.
    """
    where = target(db, server, token)
    values = [json_argument(text, f"ARGS_JSON #{n}") for n, text in enumerate(args or (), 1)]
    answer = run(_query(where, workflow_id, name, values, timeout))
    if as_json:
        render.print_json({"workflow_id": workflow_id, "query": name, "result": answer})
    else:
        render.console().print(escape(render.value_text(answer)), soft_wrap=True)


async def _update(
    db: Target,
    workflow_id: str,
    name: str,
    payload: tuple[Any] | tuple[()],
    timeout: str,
    idempotency_key: str | None,
) -> Any:
    async with open_target(db) as engine:
        return await engine.update(
            workflow_id, name, *payload, timeout=timeout, idempotency_key=idempotency_key
        )


def _timed_out(
    name: str, idempotency_key: str | None, as_json: bool, db: Target
) -> Callable[[PyweftError], None]:
    """After an UpdateTimeoutError's red line: the update id and how to fetch its answer."""

    def explain(exc: PyweftError) -> None:
        if not isinstance(exc, UpdateTimeoutError):
            return
        again = (
            "; or rerun this command: with the same --idempotency-key it returns the stored "
            "answer and never applies the update twice"
            if idempotency_key is not None
            else ""
        )
        render.hint(
            f"update id {exc.update_id}: the update stays queued. Fetch its answer later with "
            f"`pyweft workflows update-result {exc.update_id}{db_flag(db)}`{again}"
        )
        if as_json:
            render.print_json(
                {
                    "workflow_id": exc.workflow_id,
                    "update": name,
                    "update_id": exc.update_id,
                    "answered": False,
                }
            )

    return explain


@app.command("update")
def update_run(
    workflow_id: IdArgument,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The update's name.")],
    payload: Annotated[
        str | None,
        typer.Argument(
            metavar="PAYLOAD_JSON", help=f"The payload as {_JSON_TEXT} Omit it to send none."
        ),
    ] = None,
    timeout: TimeoutOption = "5s",
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key",
            help="Resending with the same key returns the stored answer; never applied twice.",
        ),
    ] = None,
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Send an update and print the workflow's answer.

    The request is stored, then the engine process that drives the run
    handles it at the run's next step boundary (it polls the store) and
    writes the answer, which this command waits for. Without PAYLOAD_JSON no
    payload is sent at all (a handler is called with no argument). If no
    answer comes within --timeout the update stays queued: the command exits
    1 and prints the update id, for `pyweft workflows update-result`.
    """
    where = target(db, server, token)
    value = () if payload is None else (json_argument(payload, "PAYLOAD_JSON"),)
    answer = run(
        _update(where, workflow_id, name, value, timeout, idempotency_key),
        on_error=_timed_out(name, idempotency_key, as_json, where),
    )
    if as_json:
        render.print_json(
            {"workflow_id": workflow_id, "update": name, "answered": True, "result": answer}
        )
    else:
        render.console().print(escape(render.value_text(answer)), soft_wrap=True)


async def _update_result(db: Target, update_id: str, timeout: str) -> Any:
    async with open_target(db) as engine:
        return await engine.update_result(update_id, timeout=timeout)


@app.command("update-result")
def update_result(
    update_id: Annotated[
        str, typer.Argument(metavar="UPDATE_ID", help="The id printed when an update timed out.")
    ],
    timeout: TimeoutOption = "5s",
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print the answer to an earlier update (e.g. one that timed out), waiting up to --timeout."""
    where = target(db, server, token)

    def still_waiting(exc: PyweftError) -> None:
        if isinstance(exc, UpdateTimeoutError):
            render.hint("the update is still queued; run this command again later")

    answer = run(_update_result(where, update_id, timeout), on_error=still_waiting)
    if as_json:
        render.print_json({"update_id": update_id, "answered": True, "result": answer})
    else:
        render.console().print(escape(render.value_text(answer)), soft_wrap=True)


# --- lifecycle ----------------------------------------------------------------------

Action = Literal["cancel", "suspend", "resume", "fail"]


@contextmanager
def _engine_declines_quietly() -> Iterator[None]:
    # engine.resume offers to drive the run in this process; the CLI registers no workflow
    # types, so the engine declines and logs that it leaves the run for an engine that has
    # the type. That is exactly the intent here, so the warning would only be noise.
    logger = logging.getLogger("pyweft")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


async def _lifecycle(
    db: Target, workflow_id: str, action: Action, reason: str = ""
) -> tuple[WorkflowInfo, WorkflowInfo]:
    """Apply ``action`` unless it is a no-op; return the run before and after."""
    async with open_target(db) as engine:
        before = await engine.describe(workflow_id)
        if action == "cancel" and not before.is_terminal:
            await engine.cancel(workflow_id)
        elif action == "suspend" and not before.is_terminal:
            await engine.suspend(workflow_id)
        elif action == "resume" and before.status != "running":
            with _engine_declines_quietly():
                await engine.resume(workflow_id)
        elif action == "fail":
            await engine.fail(workflow_id, reason)
        # Leaving this block shuts the engine down at once, before any run could be driven.
        return before, await engine.describe(workflow_id)


@app.command("cancel")
def cancel_run(
    workflow_id: IdArgument,
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Cancel a running, pending or suspended run; a finished run is left as it is.

    A pending or suspended run is cancelled at once. For a running run the
    request is stored before this returns, and the engine driving it (or the
    next one to recover it) raises CancelledError in the workflow, which may
    clean up before it ends as cancelled. Cancelling a finished run does
    nothing and exits 0.
    """
    where = target(db, server, token)
    before, after = run(_lifecycle(where, workflow_id, "cancel"))
    out = render.console()
    if before.is_terminal:
        out.print(f"{escape(workflow_id)} is already {render.status_text(before.status)}")
    elif after.is_terminal:
        out.print(f"{escape(workflow_id)} is now {render.status_text(after.status)}")
    else:
        out.print(
            f"{escape(workflow_id)}: cancel requested; the engine driving it will cancel it",
            soft_wrap=True,
        )


@app.command("suspend")
def suspend_run(
    workflow_id: IdArgument,
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Pause a running or pending run: it keeps its journal and is not recovered until resumed.

    The store records the run as suspended before this returns. Suspending a
    suspended or finished run does nothing and exits 0.
    """
    where = target(db, server, token)
    before, after = run(_lifecycle(where, workflow_id, "suspend"))
    out = render.console()
    if before.status == after.status:
        out.print(f"{escape(workflow_id)} is already {render.status_text(before.status)}")
        return
    out.print(
        f"{escape(workflow_id)} is now {render.status_text(after.status)}; "
        f"`pyweft workflows resume {escape(workflow_id)}{escape(db_flag(where))}` continues it",
        soft_wrap=True,
    )


@app.command("resume")
def resume_run(
    workflow_id: IdArgument,
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Mark a suspended or blocked run as running again, so that an engine picks it up.

    This command drives no workflows: it only changes the stored status and
    leaves a wake-up. A running engine (one that recovers runs) that
    registers the workflow type and version picks it up within its poll
    interval; otherwise the next engine to start recovers it. A blocked run
    whose code still does not replay it is blocked again. A running run is
    left as it is; a finished or pending run exits 1.
    """
    where = target(db, server, token)
    before, after = run(_lifecycle(where, workflow_id, "resume"))
    out = render.console()
    if before.status == "running":
        out.print(f"{escape(workflow_id)} is already {render.status_text('running')}")
        return
    out.print(
        f"{escape(workflow_id)} is now {render.status_text(after.status)}. A running engine "
        f"with workflow type {escape(repr(after.workflow_type))} picks it up within its poll "
        "interval; otherwise the next engine to start recovers it",
        soft_wrap=True,
    )


@app.command("fail")
def fail_run(
    workflow_id: IdArgument,
    reason: Annotated[
        str,
        typer.Option(
            "--reason",
            metavar="TEXT",
            help="Why the run is failed by hand; stored as its error message.",
        ),
    ],
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """End a blocked, suspended or pending run as failed, with --reason as its error.

    For a blocked run whose code will not be fixed. Its result() then raises
    WorkflowFailedError with error type FailedByOperator. A running run exits
    1 (cancel it instead); a finished run exits 1.
    """
    where = target(db, server, token)
    _, after = run(_lifecycle(where, workflow_id, "fail", reason))
    render.console().print(
        f"{escape(workflow_id)} is now {render.status_text(after.status)}", soft_wrap=True
    )
