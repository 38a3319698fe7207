"""``--server URL``: run a CLI command against a pyweft server instead of a store.

Commands that support it take ``--server`` (``$PYWEFT_ADDR``) and ``--token``
(``$PYWEFT_TOKEN``) next to ``--db``; with a server they call the same methods
through :class:`pyweft.client.Client`, so output and exit codes are the same.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from pyweft import Engine
from pyweft.cli import bad_parameter
from pyweft.cli.store import open_engine

if TYPE_CHECKING:
    from pyweft.client import Client

ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        metavar="URL",
        envvar="PYWEFT_ADDR",
        show_envvar=True,
        help="Talk to a pyweft server (pyweft serve) at URL instead of opening --db.",
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="PYWEFT_TOKEN",
        show_envvar=False,
        help="API key for --server (default: $PYWEFT_TOKEN).",
    ),
]


def require_server_extra(what: str) -> None:
    """A clear usage error instead of an ImportError when the extra is not installed."""
    import importlib.util

    missing = [m for m in ("starlette", "uvicorn", "httpx") if importlib.util.find_spec(m) is None]
    if missing:
        bad_parameter(
            f"{what} needs the server extra ({', '.join(missing)} missing): "
            "pip install 'pyweft[server]'"
        )


@dataclass(frozen=True)
class Remote:
    url: str
    token: str | None

    def flag(self) -> str:
        return f" --server {shlex.quote(self.url)}"


Target = str | Remote | None


def target(db: str | None, server: str | None, token: str | None) -> Target:
    """Where a command goes: the store ``db``, or the server; both is a usage error."""
    if server is None:
        return db
    if db is not None:
        bad_parameter(
            "give --db or --server, not both (check $PYWEFT_DATABASE_URL and $PYWEFT_ADDR)"
        )
    if not server.startswith(("http://", "https://")):
        bad_parameter(f"--server must be an http:// or https:// URL, got {server!r}")
    require_server_extra("--server")
    return Remote(server, token)


@asynccontextmanager
async def open_target(where: Target, *, read_only: bool = False) -> AsyncIterator[Engine | Client]:
    """A client engine on the store, or an HTTP client on the server."""
    if isinstance(where, Remote):
        from pyweft.client import Client

        async with Client(where.url, token=where.token) as client:
            yield client
        return
    async with open_engine(where, read_only=read_only) as engine:
        yield engine
