"""``pyweft schedules list|show|create|update|pause|resume|trigger|backfill|delete``.

The CLI opens the store as a client: it stores schedule changes, and the engine
that holds the store fires them (it notices a change within its poll interval).
``create``, ``trigger`` and ``backfill`` start runs of a workflow, so they need
``--app MODULE`` to know it.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from pyweft import Engine, ScheduleInfo
from pyweft.cli import DbOption, JsonOption, apps, bad_parameter, json_argument, render, run
from pyweft.cli.apps import AppOption
from pyweft.cli.store import open_engine

app = typer.Typer(
    help="Recurring runs: list, create, change, pause, trigger and backfill schedules.",
    no_args_is_help=True,
    add_completion=False,
)

IdArg = Annotated[str, typer.Argument(metavar="SCHEDULE_ID", help="The schedule's id.")]


def schedule_dict(info: ScheduleInfo) -> dict[str, Any]:
    out = asdict(info)
    out["status"] = info.status
    return out


def _emit(info: ScheduleInfo, as_json: bool, verb: str) -> None:
    if as_json:
        render.print_json(schedule_dict(info))
    else:
        render.console().print(f"schedule {escape(info.id)} {verb}; {_when_next(info)}")


def _when_next(info: ScheduleInfo) -> str:
    if info.paused:
        return "paused"
    return f"next fire {render.when(info.next_fire)}" if info.next_fire else "no further fires"


def _table(items: list[ScheduleInfo]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("ID", "WORKFLOW", "WHEN", "STATUS", "NEXT FIRE", "LAST RUN", "FIRED"):
        table.add_column(column)
    for s in items:
        cadence = f"cron {s.cron} {s.timezone}" if s.cron else f"every {s.every_s:g}s"
        table.add_row(
            escape(s.id),
            escape(s.workflow_type),
            escape(cadence),
            render.status_text(s.status),
            render.when(s.next_fire) if s.next_fire else "-",
            escape(s.last_run_id or "-"),
            str(s.fired),
        )
    return table


async def _in_engine(db: str | None, app_module: str | None, action: Any) -> Any:
    workflows = apps.load_workflows(app_module) if app_module else []
    async with open_engine(db, workflows=workflows) as engine:
        return await action(engine)


async def _read(db: str | None, action: Any) -> Any:
    async with open_engine(db, read_only=True) as engine:
        return await action(engine)


@app.command("list")
def list_schedules(
    workflow_type: Annotated[
        str | None, typer.Option("--type", help="Only schedules of this workflow type.")
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """List every schedule, by id."""

    async def action(engine: Engine) -> list[ScheduleInfo]:
        return await engine.schedules.list(workflow_type=workflow_type)

    items: list[ScheduleInfo] = run(_read(db, action))
    if as_json:
        render.print_json({"items": [schedule_dict(s) for s in items]})
    elif not items:
        render.console().print("no schedules")
    else:
        render.console().print(_table(items))


@app.command("show")
def show(
    schedule_id: IdArg,
    count: Annotated[int, typer.Option("--next", help="How many next fire times to show.")] = 5,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """One schedule, its counters and its next fire times."""

    async def action(engine: Engine) -> tuple[ScheduleInfo, list[datetime]]:
        return await engine.schedules.get(schedule_id), await engine.schedules.preview(
            schedule_id, count
        )

    info, upcoming = run(_read(db, action))
    if as_json:
        render.print_json({**schedule_dict(info), "upcoming": upcoming})
        return
    out = render.console()
    out.print(_table([info]))
    out.print(
        f"overlap {info.overlap}, catchup {info.catchup} (window {info.catchup_window_s:g}s), "
        f"jitter {info.jitter_s:g}s, origin {info.origin}; skipped {info.skipped}, "
        f"missed {info.missed}"
    )
    if info.last_missed is not None:
        m = info.last_missed
        out.print(
            f"last missed window: {m.count} occurrence(s) from {render.when(m.start)} to "
            f"{render.when(m.end)}"
        )
    for moment in upcoming:
        out.print(f"  next {render.when(moment)}")


def _options(
    cron: str | None,
    every: str | None,
    timezone: str | None,
    overlap: str | None,
    catchup: str | None,
    jitter: str | None,
) -> dict[str, Any]:
    given = {
        "cron": cron,
        "every": every,
        "timezone": timezone,
        "overlap": overlap,
        "catchup": catchup,
        "jitter": jitter,
    }
    return {k: v for k, v in given.items() if v is not None}


CronOpt = Annotated[
    str | None, typer.Option("--cron", help="Cron expression, e.g. '0 9 * * MON-FRI'.")
]
EveryOpt = Annotated[str | None, typer.Option("--every", help="Interval, e.g. '15m' or '1h'.")]
ZoneOpt = Annotated[str | None, typer.Option("--timezone", help="IANA zone for --cron.")]
OverlapOpt = Annotated[
    str | None,
    typer.Option("--overlap", help="skip, buffer_one, buffer_all, cancel_previous or allow_all."),
]
CatchupOpt = Annotated[str | None, typer.Option("--catchup", help="latest or all.")]
JitterOpt = Annotated[str | None, typer.Option("--jitter", help="Max random delay, e.g. '30s'.")]


@app.command("create")
def create(
    schedule_id: IdArg,
    workflow_type: Annotated[str, typer.Argument(metavar="WORKFLOW", help="Workflow name.")],
    args: Annotated[
        str, typer.Option("--args", metavar="JSON", help="Arguments as a JSON list.")
    ] = "[]",
    cron: CronOpt = None,
    every: EveryOpt = None,
    timezone: ZoneOpt = None,
    overlap: OverlapOpt = None,
    catchup: CatchupOpt = None,
    jitter: JitterOpt = None,
    paused: Annotated[bool, typer.Option("--paused", help="Create it paused.")] = False,
    app_module: AppOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a schedule that starts WORKFLOW at every occurrence (needs --app)."""
    if app_module is None:
        bad_parameter("schedules create needs --app MODULE, the module that defines WORKFLOW")
    values = json_argument(args, "--args")
    if not isinstance(values, list):
        bad_parameter(f"--args must be a JSON list of arguments, got {args!r}")
    options = _options(cron, every, timezone, overlap, catchup, jitter)

    async def action(engine: Engine) -> ScheduleInfo:
        return await engine.create_schedule(
            schedule_id, workflow_type, *values, paused=paused, **options
        )

    _emit(run(_in_engine(db, app_module, action)), as_json, "created")


@app.command("update")
def update(
    schedule_id: IdArg,
    cron: CronOpt = None,
    every: EveryOpt = None,
    timezone: ZoneOpt = None,
    overlap: OverlapOpt = None,
    catchup: CatchupOpt = None,
    jitter: JitterOpt = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Change a schedule's options; those not given keep their values."""
    options = _options(cron, every, timezone, overlap, catchup, jitter)

    async def action(engine: Engine) -> ScheduleInfo:
        return await engine.schedules.update(schedule_id, **options)

    _emit(run(_in_engine(db, None, action)), as_json, "updated")


@app.command("pause")
def pause(schedule_id: IdArg, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Stop firing until resumed."""

    async def action(engine: Engine) -> ScheduleInfo:
        return await engine.schedules.pause(schedule_id)

    _emit(run(_in_engine(db, None, action)), as_json, "paused")


@app.command("resume")
def resume(schedule_id: IdArg, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Fire again from the next occurrence after now."""

    async def action(engine: Engine) -> ScheduleInfo:
        return await engine.schedules.resume(schedule_id)

    _emit(run(_in_engine(db, None, action)), as_json, "resumed")


@app.command("delete")
def delete(schedule_id: IdArg, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Delete a schedule (its runs keep their provenance)."""

    async def action(engine: Engine) -> None:
        await engine.schedules.delete(schedule_id)

    run(_in_engine(db, None, action))
    if as_json:
        render.print_json({"id": schedule_id, "deleted": True})
    else:
        render.console().print(f"schedule {escape(schedule_id)} deleted")


@app.command("trigger")
def trigger(
    schedule_id: IdArg,
    app_module: AppOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Start one run now, outside the cadence (needs --app)."""
    if app_module is None:
        bad_parameter("schedules trigger needs --app MODULE, the module that defines the workflow")

    async def action(engine: Engine) -> str:
        return await engine.schedules.trigger(schedule_id)

    run_id = run(_in_engine(db, app_module, action))
    if as_json:
        render.print_json({"id": schedule_id, "run_id": run_id})
    else:
        render.console().print(f"schedule {escape(schedule_id)} started run {escape(run_id)}")


@app.command("backfill")
def backfill(
    schedule_id: IdArg,
    start: Annotated[
        str, typer.Argument(metavar="START", help="ISO time, e.g. 2026-01-01 (UTC unless it says).")
    ],
    end: Annotated[str, typer.Argument(metavar="END", help="ISO time (inclusive, past).")],
    app_module: AppOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run every occurrence in [START, END] under the overlap policy (needs --app)."""
    if app_module is None:
        bad_parameter("schedules backfill needs --app MODULE, the module that defines the workflow")
    begin, until = _iso(start, "START"), _iso(end, "END")

    async def action(engine: Engine) -> int:
        return await engine.schedules.backfill(schedule_id, begin, until)

    started = run(_in_engine(db, app_module, action))
    if as_json:
        render.print_json({"id": schedule_id, "started": started})
    else:
        render.console().print(f"schedule {escape(schedule_id)}: {started} run(s) started")


def _iso(text: str, what: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        bad_parameter(f"{what} {text!r} is not an ISO time; write e.g. 2026-01-01T06:00:00+00:00")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
