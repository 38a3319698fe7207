"""``pyweft conformance -- <command>``: check a remote worker against a real server.

Starts a server on a temporary SQLite store, runs ``command`` as the worker (the
stream URL and an API key in ``PYWEFT_WORKER_URL`` and ``PYWEFT_WORKER_TOKEN``, see
:mod:`pyweft.server.conformance`), and prints a pass/fail table; exits 1 when any
check fails.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer

from pyweft.cli import bad_parameter, render
from pyweft.cli.remote import require_server_extra


def conformance(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="-- COMMAND...",
            help="The worker to check, after `--` (e.g. -- node --experimental-websocket w.mjs).",
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option("--timeout", metavar="SECONDS", min=1, max=600, help="Per check."),
    ] = 15.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Check that a remote worker speaks the task protocol: register, echo, failure,
    heartbeats, cancellation, reassignment after a disconnect, graceful shutdown."""
    if not command:
        bad_parameter("give the worker command after --, e.g. pyweft conformance -- python w.py")
    require_server_extra("pyweft conformance")
    from pyweft.server.conformance import run_conformance

    report = asyncio.run(run_conformance(command, timeout_s=timeout))
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        out = render.console()
        for r in report.results:
            mark = "[green]pass[/green]" if r.ok else "[red]FAIL[/red]"
            out.print(f"{mark}  {r.name:<30} {r.seconds:6.2f}s  {r.detail}", soft_wrap=True)
        passed = sum(r.ok for r in report.results)
        failed = len(report.results) - passed
        out.print(f"{passed} passed, {failed} failed", soft_wrap=True, highlight=False)
        if not report.ok and report.worker_log:
            out.print("--- the worker's last output ---", soft_wrap=True)
            out.print(report.worker_log, soft_wrap=True, markup=False, highlight=False)
    if not report.ok:
        raise typer.Exit(1)
