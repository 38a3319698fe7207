"""The ``pyweft`` typer app: ``version``, ``doctor``, ``demo``, ``workflows``, ``reviews``,
``schedules``, ``versions`` and ``queues``."""

from __future__ import annotations

import platform
from typing import Annotated, Any

import typer
import typer.core

import pyweft
from pyweft.cli import (
    CODEC_ENV,
    activities,
    apps,
    bulk,
    conformance,
    demo,
    doctor,
    keys,
    mcp,
    purge,
    queues,
    render,
    replay,
    reviews,
    schedules,
    serve,
    set_codec,
    state,
    versions,
    worker,
    workers,
    workflows,
)


def _flag_has_no_type(original: Any) -> Any:
    # typer prints a type column for every option, so an on/off flag reads
    # `--json <bool>` as if it took a value. A flag takes none: print nothing.
    def display_type_rich(self: typer.core.TyperOption, ctx: Any) -> str | None:
        if self.is_flag and self.metavar is None:
            return None
        return original(self, ctx)  # type: ignore[no-any-return]

    return display_type_rich


if not getattr(typer.core.TyperOption.display_type_rich, "_pyweft", False):
    typer.core.TyperOption.display_type_rich = _flag_has_no_type(  # type: ignore[method-assign]
        typer.core.TyperOption.display_type_rich
    )
    typer.core.TyperOption.display_type_rich._pyweft = True  # type: ignore[attr-defined]

app = typer.Typer(
    name="pyweft",
    help="Durable execution for Python: inspect stores and runs, message and fork them, decide "
    "reviews, check versions before a deploy, or try the demo.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals may hold connection strings
)
app.command("doctor")(doctor.doctor)
app.command("demo")(demo.demo)
workflows.app.command("purge")(purge.purge_runs)
workflows.app.command("bulk")(bulk.bulk_runs)
workflows.app.command("export")(replay.export_runs)
app.command("replay")(replay.replay_histories)
app.add_typer(workflows.app, name="workflows")
app.add_typer(reviews.app, name="reviews")
app.add_typer(activities.app, name="activities")
app.add_typer(schedules.app, name="schedules")
app.add_typer(state.app, name="state")
app.add_typer(versions.app, name="versions")
app.add_typer(queues.app, name="queues")
app.command("serve")(serve.serve)
app.add_typer(keys.app, name="keys")
app.command("mcp")(mcp.mcp)
app.command("worker")(worker.worker)
app.add_typer(workers.app, name="workers")
app.command("conformance")(conformance.conformance)


def _print_version() -> None:
    out = render.console()
    out.print(f"pyweft {pyweft.__version__}")
    out.print(f"Python {platform.python_version()} ({platform.python_implementation()})")


def _version_flag(value: bool) -> None:
    if value:
        _print_version()
        raise typer.Exit()


@app.callback()
def root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_version_flag,
            is_eager=True,
            help="Print the pyweft and Python versions and exit.",
        ),
    ] = False,
    codec: Annotated[
        str | None,
        typer.Option(
            "--codec",
            envvar=CODEC_ENV,
            show_envvar=True,
            metavar="MODULE:NAME",
            help="Your PayloadCodec (an instance, or a no-argument factory), for stores "
            "whose payloads it encoded. Goes before the command.",
        ),
    ] = None,
) -> None:
    """Durable execution for Python: inspect stores and runs, message and fork them, decide
    reviews, check versions before a deploy, or try the demo."""
    if codec is not None:
        set_codec(apps.load_codec(codec))


@app.command("version")
def version() -> None:
    """Print the pyweft and Python versions."""
    _print_version()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
