"""``pyweft mcp --db URL --app MODULE``: the engine's MCP tools over stdio, for an AI
agent (Claude Desktop, an IDE...) that launches MCP servers as subprocesses.

By default the command runs an engine on the store that drives the runs it starts
(the workflows come from ``--app``), like an application's own process. With
``--client`` it opens the store as a client instead, for a store an application
already drives: runs it starts are left to that application. stdout carries the
protocol only; messages go to stderr. No auth: whoever can launch the process can
already open the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

import typer

from pyweft import Engine, PyweftError
from pyweft.cli import DbOption, bad_parameter, cli_codec, render
from pyweft.cli.apps import AppOption, load_workflows


def require_mcp_extra(what: str) -> None:
    """A usage error (exit 2) naming the extra, instead of an ImportError."""
    from pyweft.server.mcp import MCP_EXTRA_HINT, mcp_available

    if not mcp_available():
        bad_parameter(f"{what} needs the MCP SDK: {MCP_EXTRA_HINT}")


async def _serve(db: str | None, workflows: list[Callable[..., Any]], client: bool) -> None:
    from mcp.server.stdio import stdio_server

    from pyweft.server.mcp.runtime import build_server
    from pyweft.storage import open_storage

    storage = open_storage(db, sqlite_create=not client)
    try:
        async with Engine(
            storage,
            role="client" if client else "engine",
            workflows=workflows,
            codec=cli_codec(),
        ) as engine:
            server = build_server(engine)
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
    finally:
        await storage.close()


def mcp(
    db: DbOption = None,
    app: AppOption = None,
    client: Annotated[
        bool,
        typer.Option(
            "--client",
            help="Open the store as a client: runs started here are driven by the "
            "application's engine on the same store, not by this process.",
        ),
    ] = False,
) -> None:
    """Serve the engine's MCP tools (start, list, describe, result, signal, query, update,
    cancel, and start_<type> per workflow) over stdio for an AI agent."""
    require_mcp_extra("pyweft mcp")
    if app is None and not client:
        bad_parameter(
            "pass --app MODULE (the module defining your @workflow functions) so this "
            "process can run them, or --client to leave runs to your application's engine"
        )
    workflows = load_workflows(app) if app is not None else []
    try:
        asyncio.run(_serve(db, workflows, client))
    except PyweftError as exc:
        render.error(exc.code, str(exc))
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        pass
