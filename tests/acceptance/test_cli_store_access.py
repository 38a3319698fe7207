"""How the CLI opens a store: as a client beside a live engine, never creating a file."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from pyweft import Engine, WorkflowContext, workflow

PYWEFT = [sys.executable, "-m", "pyweft.cli.main"]

WORKER = """
import asyncio, sys
from pyweft import Engine, WorkflowContext, workflow

@workflow(name="waits")
async def waits(ctx: WorkflowContext) -> str:
    return str(await ctx.wait_for_signal("go"))

async def main() -> None:
    async with Engine(sys.argv[1], workflows=[waits], poll_interval=0.05) as engine:
        handle = await engine.start(waits, id="w-1", on_conflict="use_existing")
        print("READY", flush=True)
        print("RESULT", await handle.result(), flush=True)

asyncio.run(main())
"""


def pyweft(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PYWEFT, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


@workflow(name="waits")
async def waits(ctx: WorkflowContext) -> str:
    return str(await ctx.wait_for_signal("go"))


def test_inspection_and_messages_on_a_missing_file_fail_and_create_nothing(tmp_path: Path) -> None:
    for args in (
        ("workflows", "list"),
        ("workflows", "show", "w-1"),
        ("workflows", "signal", "w-1", "go"),
        ("reviews", "list"),
    ):
        done = pyweft(*args, "--db", str(tmp_path / "tpyo.db"), cwd=tmp_path)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert "there is no SQLite database at" in done.stderr, args
        assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_inspection_leaves_the_file_untouched(tmp_path: Path) -> None:
    db = tmp_path / "app.db"

    async def make() -> None:
        async with Engine(f"sqlite:///{db}", workflows=[waits]) as engine:
            await engine.start(waits, id="w-1")

    asyncio.run(make())
    before = db.read_bytes()
    done = pyweft("workflows", "list", "--db", str(db), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [i["id"] for i in json.loads(done.stdout)["items"]] == ["w-1"]
    # The database is byte for byte the same (SQLite may open its WAL side files to read).
    assert db.read_bytes() == before


def test_the_cli_works_beside_a_live_engine_that_holds_the_file(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    engine = subprocess.Popen(
        [sys.executable, "-c", WORKER, f"sqlite:///{db}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert engine.stdout is not None
        assert engine.stdout.readline().strip() == "READY"
        assert json.loads((tmp_path / "app.db.lock").read_text())["pid"] == engine.pid
        listed = pyweft("workflows", "list", "--db", str(db), "--json", cwd=tmp_path)
        assert listed.returncode == 0, listed.stderr
        assert [i["status"] for i in json.loads(listed.stdout)["items"]] == ["running"]
        sent = pyweft("workflows", "signal", "w-1", "go", '"now"', "--db", str(db), cwd=tmp_path)
        assert sent.returncode == 0, sent.stderr
        deadline = time.monotonic() + 30
        line = engine.stdout.readline().strip()
        assert time.monotonic() < deadline
        assert line == "RESULT now"
        assert engine.wait(timeout=30) == 0
    finally:
        if engine.poll() is None:
            engine.kill()
        engine.wait()
        if engine.stdout is not None:
            engine.stdout.close()
