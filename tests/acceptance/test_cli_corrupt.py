"""The CLI over a damaged store: no traceback, damaged runs shown as quarantined, doctor names
each bad key, and nothing from the store reaches the terminal as a raw control sequence.

An engine in this process fills a real SQLite file; garbage and hostile values
are then written straight into its ``kv`` table with the ``sqlite3`` module, as
an older pyweft, a stray tool or a bad disk could leave them. ``pyweft`` runs as
a subprocess, as a user would run it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pyweft import Engine, VirtualClock, WorkflowContext, activity, workflow
from pyweft.engine.control.core import create_ops
from pyweft.engine.replay import keys, records
from pyweft.storage.base import Put
from support.poll import eventually

PYWEFT = [sys.executable, "-m", "pyweft.cli.main"]
GARBAGE = b"\xc1\xff\x00 not msgpack"
EVIL_ID = "\x1b[2Jevil\x07\u202eid"
ODD_TIMES = "odd-times"


@activity
async def hello(name: str) -> str:
    return f"hello {name}"


@workflow
async def napper(ctx: WorkflowContext) -> str:
    await ctx.run(hello, ctx.workflow_id)
    await ctx.sleep("1h")
    return "rested"


def pyweft(*args: str, db: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYWEFT_DATABASE_URL", "FORCE_COLOR")}
    env.update(COLUMNS="250", NO_COLOR="1")
    return subprocess.run(
        [*PYWEFT, *args, "--db", f"sqlite:///{db}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        errors="surrogateescape",
    )


def put_raw(db: Path, pairs: list[tuple[str, bytes]]) -> None:
    with sqlite3.connect(db) as conn:
        conn.executemany("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", pairs)


def stored_run(workflow_id: str, **fields: object) -> list[tuple[str, bytes]]:
    """The rows of a run as the engine would store it, with ``fields`` overridden."""
    values: dict[str, object] = {
        "id": workflow_id,
        "type": "napper",
        "version": "1",
        "status": "failed",
        "args": b"\x90",
        "created_at": 1_700_000_000.0,
        "updated_at": 1_700_000_100.0,
        "error": records.ErrorInfo(type="Boom\x1b[31m", message="red \x1b]0;title\x07 alert"),
    }
    state = records.WorkflowState(**values)  # type: ignore[arg-type]
    ops, _ = create_ops(state, records.encode(state))
    rows = [(op.key, op.value) for op in ops if isinstance(op, Put)]
    # The odd fields go into the state record only: the index keys stay well formed.
    odd = records.WorkflowState(**{**values, **fields})  # type: ignore[arg-type]
    return [*rows, (keys.wf(workflow_id), records.encode(odd))]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corrupt") / "app.db"
    clock = VirtualClock()

    async def fill() -> None:
        async with Engine(f"sqlite:///{path}", workflows=[napper], clock=clock) as engine:
            for i in ("fine", "broken-state", "broken-journal"):
                await engine.start(napper, id=i)
            await eventually(lambda: clock.pending_timers() == 3, what="all asleep")

    asyncio.run(fill())
    put_raw(
        path,
        [
            ("wf:broken-state", GARBAGE),
            ("wf:broken-journal:j:0000000001", GARBAGE),
            ("ix:a:not-an-index-entry", b""),
            *stored_run(EVIL_ID),
            *stored_run(ODD_TIMES, updated_at=1e300, error=None),
            (
                keys.journal(ODD_TIMES, 1),
                records.encode(
                    records.StepRecord(
                        step=1,
                        kind="activity",
                        name="hello",
                        ok=True,
                        started_at=float("inf"),
                        finished_at=1e300,
                    )
                ),
            ),
            (
                keys.pending(ODD_TIMES, 2),
                records.encode(
                    records.PendingStep(step=2, kind="sleep", name="sleep", deadline=float("nan"))
                ),
            ),
        ],
    )
    return path


def assert_clean(result: subprocess.CompletedProcess[str]) -> None:
    for stream in (result.stdout, result.stderr):
        assert "Traceback" not in stream, stream
        assert "\x1b" not in stream and "\x07" not in stream and "\u202e" not in stream, stream


def test_list_shows_damaged_runs_as_quarantined_without_a_traceback(db: Path) -> None:
    result = pyweft("workflows", "list", db=db)
    assert_clean(result)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[2:] if line.strip()}
    assert "quarantined" in rows["broken-state"]
    assert "(unreadable)" in rows["broken-state"]
    assert "fine" in rows and "quarantined" not in rows["fine"]
    assert "not-an-index-entry" not in result.stdout


def test_list_json_marks_the_damaged_run_and_names_its_key(db: Path) -> None:
    result = pyweft("workflows", "list", "--json", db=db)
    assert result.returncode == 0, result.stderr
    items = {item["id"]: item for item in json.loads(result.stdout)["items"]}
    assert items["broken-state"]["quarantined"] is True
    assert items["broken-state"]["corrupt_key"] == "wf:broken-state"
    assert items["fine"]["quarantined"] is False


@pytest.mark.parametrize(
    ("workflow_id", "key"),
    [("broken-state", "wf:broken-state"), ("broken-journal", "wf:broken-journal:j:0000000001")],
)
def test_show_of_a_damaged_run_names_the_key_without_a_traceback(
    db: Path, workflow_id: str, key: str
) -> None:
    result = pyweft("workflows", "show", workflow_id, db=db)
    assert_clean(result)
    assert result.returncode == 0, result.stderr
    assert "quarantined" in result.stdout
    assert key in result.stdout
    assert "steps and events cannot be shown" in result.stdout


def test_doctor_exits_non_zero_and_names_every_damaged_key(db: Path) -> None:
    result = pyweft("doctor", db=db)
    assert_clean(result)
    assert result.returncode == 1, result.stdout + result.stderr
    for key in ("wf:broken-state", "wf:broken-journal:j:0000000001", "ix:a:not-an-index-entry"):
        assert key in result.stdout
    assert "3 damaged" in result.stdout

    as_json = pyweft("doctor", "--json", db=db)
    assert as_json.returncode == 1
    damaged = {row["key"] for row in json.loads(as_json.stdout)["damaged"]}
    assert damaged == {
        "wf:broken-state",
        "wf:broken-journal:j:0000000001",
        "ix:a:not-an-index-entry",
    }


def test_doctor_passes_a_healthy_store(tmp_path: Path) -> None:
    path = tmp_path / "healthy.db"

    async def fill() -> None:
        async with Engine(f"sqlite:///{path}", workflows=[napper], clock=VirtualClock()) as engine:
            await engine.start(napper, id="fine")

    asyncio.run(fill())
    result = pyweft("doctor", db=path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all readable" in result.stdout


def test_control_characters_from_the_store_are_printed_escaped(db: Path) -> None:
    listed = pyweft("workflows", "list", db=db)
    assert_clean(listed)
    assert "\\x1b[2Jevil\\x07\\u202eid" in listed.stdout

    shown = pyweft("workflows", "show", EVIL_ID, db=db)
    assert_clean(shown)
    assert shown.returncode == 0, shown.stderr
    assert "\\x1b[2Jevil" in shown.stdout
    assert "Boom\\x1b[31m: red \\x1b]0;title\\x07 alert" in shown.stdout

    missing = pyweft("workflows", "show", EVIL_ID + "-missing", db=db)
    assert_clean(missing)
    assert missing.returncode == 1


def test_show_renders_stored_times_out_of_any_calendar_legibly(db: Path) -> None:
    result = pyweft("workflows", "show", ODD_TIMES, db=db)
    assert_clean(result)
    assert result.returncode == 0, result.stderr
    assert "invalid time" in result.stdout
    as_json = pyweft("workflows", "show", ODD_TIMES, "--json", db=db)
    assert as_json.returncode == 0, as_json.stderr
    assert [s["step"] for s in json.loads(as_json.stdout)["steps"]] == [1, 2]
