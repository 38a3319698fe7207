"""``pyweft serve MODULE:ENGINE``: the HTTP server for an engine defined in your code."""

from __future__ import annotations

import asyncio
import importlib
from typing import Annotated, Any

import typer

from pyweft import Engine, PyweftError
from pyweft.cli import bad_parameter, render
from pyweft.cli.apps import _cwd_importable


def load_engine(spec: str) -> Engine:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        bad_parameter(f"{spec!r} must be MODULE:NAME, e.g. myapp:engine")
    _cwd_importable()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        bad_parameter(f"{module_name!r} cannot be imported: {type(exc).__name__}: {exc}")
    target: Any = getattr(module, attr, None)
    if callable(target) and not isinstance(target, Engine):
        target = target()
    if not isinstance(target, Engine):
        bad_parameter(f"{spec!r} is not a pyweft Engine (nor a function returning one)")
    return target


def serve(
    target: Annotated[str, typer.Argument(metavar="MODULE:ENGINE", help="Your Engine.")],
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 7233,
    auth: Annotated[
        str,
        typer.Option(
            envvar="PYWEFT_SERVER_AUTH",
            help="'keys': require API keys (pyweft keys create); 'none': open.",
        ),
    ] = "none",
    allow_unauthenticated: Annotated[
        bool,
        typer.Option(
            "--allow-unauthenticated",
            help="Allow --auth none on a non-loopback address (a proxy authenticates).",
        ),
    ] = False,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option("--cors-origin", help="Allow browsers on this exact origin (repeatable)."),
    ] = None,
    graceful_timeout: Annotated[
        int,
        typer.Option(help="On SIGTERM, seconds to let requests in flight finish."),
    ] = 10,
    dashboard: Annotated[
        bool,
        typer.Option(
            "--dashboard/--no-dashboard", help="Serve the web dashboard at / (on by default)."
        ),
    ] = True,
    access_log: Annotated[
        bool,
        typer.Option(
            "--access-log/--no-access-log",
            help="Log one line per request on uvicorn.access (on by default).",
        ),
    ] = True,
    ssl_certfile: Annotated[str | None, typer.Option(help="TLS certificate (PEM).")] = None,
    ssl_keyfile: Annotated[str | None, typer.Option(help="TLS private key (PEM).")] = None,
) -> None:
    """Serve the REST API, event feeds, OpenAPI document and dashboard for your engine."""
    from pyweft.cli.remote import require_server_extra

    require_server_extra("pyweft serve")
    from pyweft.server import CorsConfig, ServerAuth
    from pyweft.server.serve import serve as run_server

    if auth not in ("keys", "none"):
        bad_parameter(f"--auth must be 'keys' or 'none', not {auth!r}")
    engine = load_engine(target)
    options: dict[str, Any] = {}
    if not access_log:  # about 10 µs of the server's CPU per request when on
        options["access_log"] = False
    if ssl_certfile:
        options["ssl_certfile"] = ssl_certfile
    if ssl_keyfile:
        options["ssl_keyfile"] = ssl_keyfile
    try:
        asyncio.run(
            run_server(
                engine,
                host=host,
                port=port,
                auth=ServerAuth() if auth == "keys" else None,
                allow_unauthenticated=allow_unauthenticated,
                graceful_s=graceful_timeout,
                cors=CorsConfig(allowed_origins=cors_origin) if cors_origin else None,
                uvicorn_options=options,
                dashboard=dashboard,
            )
        )
    except PyweftError as exc:
        render.error(exc.code, str(exc))
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        pass
