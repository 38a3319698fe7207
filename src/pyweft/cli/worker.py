"""``pyweft worker MODULE --queue media --concurrency 8``: serve activity task queues.

With ``--server URL`` (and ``--token``) the worker reaches the queues through a
pyweft server's task stream instead of opening the store.

The module's top-level ``@activity`` functions (defined there or imported) are
what the worker can run. It serves until SIGTERM or SIGINT, then drains: no new
claims, in-flight attempts get ``--drain-timeout`` to finish, the rest go back
for another worker.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Annotated, Any

import typer

from pyweft.cli import DbOption, bad_parameter, cli_codec, render, run
from pyweft.cli.apps import _cwd_importable
from pyweft.cli.remote import ServerOption, TokenOption, require_server_extra
from pyweft.definitions import ActivityDefinition
from pyweft.storage.factory import open_storage
from pyweft.storage.sqlite import SQLiteStorage
from pyweft.worker import Worker

ACTIVITY_MARKER = "__pyweft_activity__"


def load_activities(module_name: str) -> list[Callable[..., Any]]:
    """The ``@activity`` functions among the top-level names of ``module_name``."""
    _cwd_importable()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        bad_parameter(f"{module_name!r} cannot be imported: {exc}")
    except Exception as exc:
        bad_parameter(f"{module_name!r} raised {type(exc).__name__} while being imported: {exc}")
    found: dict[int, Callable[..., Any]] = {}
    for value in vars(module).values():
        if callable(value) and isinstance(
            getattr(value, ACTIVITY_MARKER, None), ActivityDefinition
        ):
            found.setdefault(id(value), value)
    if not found:
        bad_parameter(f"{module_name!r} defines no @activity functions at its top level")
    return list(found.values())


def worker(
    module: Annotated[
        str,
        typer.Argument(
            metavar="MODULE",
            help="A dotted module path (e.g. myapp.tasks) whose top-level @activity "
            "functions the worker runs.",
        ),
    ],
    queue: Annotated[
        list[str] | None,
        typer.Option("--queue", "-q", metavar="NAME", help="A queue to serve (repeatable)."),
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, max=1000, help="Attempts run at once.")
    ] = 8,
    worker_id: Annotated[
        str | None, typer.Option("--id", metavar="ID", help="Default: host-pid-random.")
    ] = None,
    drain_timeout: Annotated[
        float,
        typer.Option("--drain-timeout", metavar="SECONDS", help="How long a stop waits."),
    ] = 30.0,
    poll_interval: Annotated[
        float, typer.Option("--poll-interval", metavar="SECONDS", min=0.001, max=60)
    ] = 1.0,
    db: DbOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Serve activity task queues until SIGTERM/SIGINT, then drain. With --server, through
    a pyweft server's task stream instead of the store (docs/guides/remote-workers.md)."""
    activities = load_activities(module)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if server is not None:
        if db is not None:
            bad_parameter("give --db or --server, not both (check $PYWEFT_DATABASE_URL)")
        require_server_extra("pyweft worker --server")
        from pyweft.worker.remote import RemoteWorker

        async def serve_remote() -> None:
            remote = RemoteWorker(
                server,
                token=token,
                activities=activities,
                queues=queue or ["default"],
                concurrency=concurrency,
                worker_id=worker_id,
                drain_timeout=drain_timeout,
                codec=cli_codec(),
            )
            render.console().print(
                f"worker {remote.id} serves {', '.join(remote.queues)} via {remote.url} "
                f"({len(activities)} activities, {concurrency} slots)",
                soft_wrap=True,
            )
            await remote.run()

        run(serve_remote())
        return

    async def serve() -> None:
        # A worker may start before any engine, so it creates a missing SQLite store like
        # Worker(url) does, and says so: a mistyped --db then shows at once.
        storage = open_storage(db)
        try:
            if isinstance(storage, SQLiteStorage) and storage.created:
                render.console().print(
                    f"created a new, empty store at {storage.path}: engines must open the "
                    "same file (check --db if one should already be there)",
                    soft_wrap=True,
                )
            w = Worker(
                storage,
                activities=activities,
                queues=queue or ["default"],
                concurrency=concurrency,
                worker_id=worker_id,
                drain_timeout=drain_timeout,
                poll_interval=poll_interval,
                codec=cli_codec(),  # `pyweft --codec MODULE:NAME worker ...`
            )
            render.console().print(
                f"worker {w.id} serves {', '.join(w.queues)} "
                f"({len(activities)} activities, {concurrency} slots)",
                soft_wrap=True,
            )
            await w.run()
        finally:
            await storage.close()

    run(serve())
