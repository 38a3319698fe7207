"""CLI commands with ``--server``: same output and exit codes as with ``--db``."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pyweft import Engine, WorkflowContext, workflow
from pyweft.cli.main import app

from .conftest import WORKFLOWS
from .live import live_server


@workflow
async def asks_for_review(ctx: WorkflowContext) -> str:
    decision = await ctx.review({"amount": 10}, review_type="invoice", reviewers=["ann"])
    return decision.decision


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A server on a SQLite store, on its own thread; yields (server url, db url)."""
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    ready: list[str] = []
    up = threading.Event()
    stop: list[asyncio.Event] = []

    async def main() -> None:
        stop.append(asyncio.Event())
        async with Engine(db, workflows=[*WORKFLOWS, asks_for_review]) as engine:
            await engine.start("waits_for_go", id="w1", tags=["t"])
            done = await engine.start("add_three", 1, id="a1")
            await done.result(timeout=10)
            await engine.start(asks_for_review, id="r1")
            async with live_server(engine) as url:
                ready.append(url)
                up.set()
                await stop[0].wait()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(main(),))
    thread.start()
    assert up.wait(30)
    yield ready[0], db
    loop.call_soon_threadsafe(stop[0].set)
    thread.join(30)
    loop.close()


def cli(*args: str) -> tuple[int, str]:
    runner = CliRunner(
        env={"COLUMNS": "200", "NO_COLOR": "1", "PYWEFT_DATABASE_URL": None, "PYWEFT_ADDR": None}
    )
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    "command",
    [
        ["workflows", "list", "--json"],
        ["workflows", "list", "--status", "completed", "--json"],
        ["workflows", "count", "--json"],
        ["workflows", "show", "a1", "--json"],
        ["workflows", "show", "missing"],
        ["workflows", "query", "w1", "seen"],
        ["workflows", "signal", "missing", "go"],
        ["workflows", "resume", "a1"],
        ["reviews", "list", "--json"],
        ["reviews", "decide", "nope", "approved", "--reviewer", "ann"],
    ],
    ids=lambda c: " ".join(c),
)
def test_same_output_and_exit_code_through_the_server(
    served: tuple[str, str], command: list[str]
) -> None:
    url, db = served
    local = cli(*command, "--db", db)
    remote = cli(*command, "--server", url)
    assert remote == local


def test_messages_and_lifecycle_through_the_server(served: tuple[str, str]) -> None:
    url, _ = served
    code, out = cli("workflows", "update", "w1", "bump", "4", "--server", url, "--json")
    assert code == 0 and json.loads(out)["result"] == 4
    code, out = cli("workflows", "suspend", "w1", "--server", url)
    assert code == 0 and "suspended" in out and f"--server {url}" in out
    assert cli("workflows", "resume", "w1", "--server", url)[0] == 0
    code, out = cli("workflows", "signal", "w1", "go", '"now"', "--server", url)
    assert code == 0
    deadline = time.monotonic() + 10
    while True:  # the run asks for its review once the engine has driven it that far
        reviews = json.loads(cli("reviews", "list", "--server", url, "--json")[1])["items"]
        if reviews or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    [review] = reviews
    code, _ = cli("reviews", "decide", review["review_id"], "approved", "--reviewer", "ann",
                  "--server", url)  # fmt: skip
    assert code == 0
    assert cli("workflows", "cancel", "w1", "--server", url)[0] == 0


def test_db_and_server_together_is_a_usage_error(served: tuple[str, str]) -> None:
    url, db = served
    code, out = cli("workflows", "list", "--db", db, "--server", url)
    assert code == 2 and "not both" in out
    code, out = cli("workflows", "list", "--server", "localhost:7233")
    assert code == 2 and "http://" in out
