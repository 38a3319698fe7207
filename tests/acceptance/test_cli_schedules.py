"""``pyweft schedules ...`` and the doctor's late-schedule report, driven as a user would."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from pyweft import Engine

PYWEFT = [sys.executable, "-m", "pyweft.cli.main"]

APP = textwrap.dedent(
    """
    from pyweft import WorkflowContext, workflow

    @workflow(name="report")
    async def report(ctx: WorkflowContext, region: str) -> str:
        return region
    """
)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
    env.update(COLUMNS="200", NO_COLOR="1", PYTHONPATH=str(cwd))
    return subprocess.run(
        [*PYWEFT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_schedules_commands_manage_a_schedule_end_to_end(tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(APP)
    db = f"sqlite:///{tmp_path / 'app.db'}"
    asyncio.run(_init(db))

    made = cli("schedules", "create", "nightly", "report", "--args", '["eu"]', "--cron",
               "0 2 * * *", "--timezone", "Europe/Berlin", "--app", "myapp", "--db", db,
               "--json", cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    created = json.loads(made.stdout)
    assert (created["id"], created["cron"], created["timezone"]) == (
        "nightly",
        "0 2 * * *",
        "Europe/Berlin",
    )
    assert created["status"] == "active" and created["origin"] == "api"

    listed = json.loads(cli("schedules", "list", "--db", db, "--json", cwd=tmp_path).stdout)
    assert [s["id"] for s in listed["items"]] == ["nightly"]

    shown = json.loads(
        cli(
            "schedules", "show", "nightly", "--next", "3", "--db", db, "--json", cwd=tmp_path
        ).stdout
    )
    assert len(shown["upcoming"]) == 3
    assert all(u.endswith(("T01:00:00Z", "T00:00:00Z")) for u in shown["upcoming"])

    upd = cli("schedules", "update", "nightly", "--overlap", "allow_all", "--db", db, "--json",
              cwd=tmp_path)  # fmt: skip
    assert json.loads(upd.stdout)["overlap"] == "allow_all"
    paused = cli("schedules", "pause", "nightly", "--db", db, "--json", cwd=tmp_path)
    assert json.loads(paused.stdout)["status"] == "paused"
    resumed = cli("schedules", "resume", "nightly", "--db", db, "--json", cwd=tmp_path)
    assert json.loads(resumed.stdout)["status"] == "active"

    fired = cli("schedules", "trigger", "nightly", "--app", "myapp", "--db", db, "--json",
                cwd=tmp_path)  # fmt: skip
    assert fired.returncode == 0, fired.stderr
    run_id = json.loads(fired.stdout)["run_id"]
    assert run_id.startswith("nightly@manual-")

    back = cli("schedules", "backfill", "nightly", "2026-01-01", "2026-01-03T12:00:00",
               "--app", "myapp", "--db", db, "--json", cwd=tmp_path)  # fmt: skip
    assert back.returncode == 0, back.stderr
    # allow_all: every occurrence runs, although the triggered run is still going (no
    # engine drives this store: the CLI only stores the runs)
    assert json.loads(back.stdout)["started"] == 3

    runs = json.loads(cli("workflows", "list", "--db", db, "--json", cwd=tmp_path).stdout)
    assert {r["id"] for r in runs["items"]} >= {run_id, "nightly@2026-01-01T01:00:00Z"}

    gone = cli("schedules", "delete", "nightly", "--db", db, cwd=tmp_path)
    assert gone.returncode == 0 and "deleted" in gone.stdout
    missing = cli("schedules", "show", "nightly", "--db", db, cwd=tmp_path)
    assert missing.returncode == 1 and "ScheduleNotFoundError" in missing.stderr


def test_bad_schedule_input_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(APP)
    db = f"sqlite:///{tmp_path / 'app.db'}"
    asyncio.run(_init(db))
    bad = cli("schedules", "create", "x", "report", "--cron", "70 * * * *", "--app", "myapp",
              "--db", db, cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 1 and "InvalidScheduleError" in bad.stderr
    no_app = cli("schedules", "create", "x", "report", "--every", "1h", "--db", db, cwd=tmp_path)
    assert no_app.returncode == 2 and "--app" in no_app.stderr
    listed = json.loads(cli("schedules", "list", "--db", db, "--json", cwd=tmp_path).stdout)
    assert listed["items"] == []


def test_doctor_reports_schedules_no_engine_fires(tmp_path: Path) -> None:
    (tmp_path / "myapp.py").write_text(APP)
    db = f"sqlite:///{tmp_path / 'app.db'}"
    asyncio.run(_init(db))
    made = cli("schedules", "create", "often", "report", "--args", '["us"]', "--every", "1s",
               "--app", "myapp", "--db", db, cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    asyncio.run(_age(db, 120))  # the store as it is after two minutes with no engine
    report = cli("doctor", "--db", db, "--json", cwd=tmp_path)
    data = json.loads(report.stdout)
    assert data["schedules"] == 1
    assert [s["id"] for s in data["late_schedules"]] == ["often"]
    assert data["late_schedules"][0]["late_by_s"] > 60
    text = cli("doctor", "--db", db, cwd=tmp_path).stdout
    assert "1 late" in text and "often (report)" in text


async def _init(db: str) -> None:
    async with Engine(db):
        pass


async def _age(db: str, seconds: float) -> None:
    """Move the schedule's due entry into the past, as if the time had passed."""
    from pyweft.engine.schedules import records as srec
    from pyweft.storage import Delete, Put, open_storage

    storage = open_storage(db)
    try:
        [(key, raw)] = await storage.scan(srec.PREFIX)
        record = srec.decode(raw, key=key)
        assert record.due_at is not None and record.next_nominal is not None
        old_due = record.due_at
        record.next_nominal -= seconds
        record.due_at -= seconds
        await storage.batch(
            [
                Delete(key=srec.due_key(old_due, record.id)),
                Put(key=srec.due_key(record.due_at, record.id), value=b""),
                Put(key=key, value=srec.encode(record)),
            ]
        )
    finally:
        await storage.close()


def test_state_commands_show_shared_state(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'app.db'}"
    asyncio.run(_put_state(db))
    listed = cli("state", "list", "--type", "report", "--db", db, "--json", cwd=tmp_path)
    assert json.loads(listed.stdout)["values"] == {"budget": {"left": 3}}
    one = cli("state", "get", "budget", "--type", "report", "--db", db, cwd=tmp_path)
    assert one.returncode == 0 and "left" in one.stdout
    missing = cli("state", "get", "nope", "--workflow", "w-1", "--db", db, "--json", cwd=tmp_path)
    assert json.loads(missing.stdout)["value"] is None
    lock = cli("state", "lock", "printer", "--db", db, "--json", cwd=tmp_path)
    assert json.loads(lock.stdout) == {"name": "printer", "permits": 0, "holders": [],
                                       "waiters": []}  # fmt: skip
    both = cli("state", "list", "--db", db, cwd=tmp_path)
    assert both.returncode == 2 and "exactly one" in both.stderr


async def _put_state(db: str) -> None:
    async with Engine(db) as engine:
        await engine.state.set("budget", {"left": 3}, workflow_type="report")
