"""The ``pyweft`` command line: the options commands share and their error boundary.

Every command talks to the engine through the public ``pyweft`` API only.
The app itself lives in :mod:`pyweft.cli.main`.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, NoReturn, TypeVar

import typer

from pyweft import PayloadCodec, PyweftError
from pyweft.cli import render

T = TypeVar("T")

DATABASE_ENV = "PYWEFT_DATABASE_URL"
CODEC_ENV = "PYWEFT_CODEC"

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        metavar="URL",
        envvar=DATABASE_ENV,
        show_envvar=True,
        help="Storage URL (sqlite:///app.db, sqlite:////abs/app.db, memory://) or a path "
        "ending in .db. Default: ./pyweft.db.",
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print JSON for tools instead of tables for people.")
]


_codec: list[PayloadCodec] = []  # set once per process by `pyweft --codec`


def set_codec(codec: PayloadCodec) -> None:
    """Make every engine this CLI process opens use ``codec`` (``pyweft --codec``)."""
    _codec[:] = [codec]


def cli_codec() -> PayloadCodec | None:
    """The codec ``--codec`` named, or ``None`` for the default."""
    return _codec[0] if _codec else None


def db_flag(db: object) -> str:
    """`` --db URL`` (or `` --server URL``) for a follow-up command hint, when the user
    passed one (else nothing)."""
    flag = getattr(db, "flag", None)
    if callable(flag):
        return str(flag())
    return f" --db {shlex.quote(db)}" if isinstance(db, str) and db else ""


def run(
    coro: Coroutine[Any, Any, T], *, on_error: Callable[[PyweftError], None] | None = None
) -> T:
    """Run a command's coroutine; a pyweft error becomes one red line and exit code 1.

    ``on_error`` may add what to do next (a hint on stderr, JSON on stdout).
    """
    try:
        return asyncio.run(coro)
    except PyweftError as exc:
        render.error(exc.code, str(exc))
        if on_error is not None:
            on_error(exc)
        raise typer.Exit(1) from None


def bad_parameter(message: str) -> NoReturn:
    """A command-line argument is unusable: one red line, exit code 2, nothing done."""
    render.error("BadParameter", message)
    raise typer.Exit(2)


def json_argument(text: str, what: str) -> Any:
    """Parse a JSON argument before anything is opened or sent."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        bad_parameter(
            f"{what} is not valid JSON ({exc.msg} at column {exc.colno}): {text!r}. Pass JSON "
            """text, e.g. '"hello"' (a string, quotes included), 42 or '{"qty": 2}'"""
        )


__all__ = [
    "CODEC_ENV",
    "DATABASE_ENV",
    "cli_codec",
    "db_flag",
    "set_codec",
    "DbOption",
    "JsonOption",
    "bad_parameter",
    "json_argument",
    "run",
]
