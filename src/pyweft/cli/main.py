"""The ``pyweft`` typer app: ``version``, ``doctor``, ``demo``, ``workflows``, ``reviews`` and
``versions``."""

from __future__ import annotations

import platform

import typer

import pyweft
from pyweft.cli import demo, doctor, render, reviews, versions, workflows

app = typer.Typer(
    name="pyweft",
    help="Durable execution for Python: inspect stores and runs, message and fork them, decide "
    "reviews, check versions before a deploy, or try the demo.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold connection strings
)
app.command("doctor")(doctor.doctor)
app.command("demo")(demo.demo)
app.add_typer(workflows.app, name="workflows")
app.add_typer(reviews.app, name="reviews")
app.add_typer(versions.app, name="versions")


@app.command("version")
def version() -> None:
    """Print the pyweft and Python versions."""
    out = render.console()
    out.print(f"pyweft {pyweft.__version__}")
    out.print(f"Python {platform.python_version()} ({platform.python_implementation()})")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
