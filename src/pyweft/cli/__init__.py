"""The ``pyweft`` command line: the options commands share and their error boundary.

Every command talks to the engine through the public ``pyweft`` API only.
The app itself lives in :mod:`pyweft.cli.main`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Annotated, Any, TypeVar

import typer

from pyweft import PyweftError
from pyweft.cli import render

T = TypeVar("T")

DATABASE_ENV = "PYWEFT_DATABASE_URL"

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar=DATABASE_ENV,
        show_envvar=True,
        help="Storage URL (sqlite:///app.db, sqlite:////abs/app.db, memory://) or a path "
        "ending in .db. Default: ./pyweft.db.",
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print JSON for tools instead of tables for people.")
]


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; a pyweft error becomes one red line and exit code 1."""
    try:
        return asyncio.run(coro)
    except PyweftError as exc:
        render.error(exc.code, str(exc))
        raise typer.Exit(1) from None


__all__ = ["DATABASE_ENV", "DbOption", "JsonOption", "run"]
