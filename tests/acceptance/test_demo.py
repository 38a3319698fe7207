"""The demo as a new user meets it: through ``tasks.py``, killed, rerun, next to their own store."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyweft import Engine, StoreInUseError

ROOT = Path(__file__).resolve().parents[2]
PYWEFT = [sys.executable, "-m", "pyweft.cli.main"]


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYWEFT_DATABASE_URL", "FORCE_COLOR")}
    env.update(COLUMNS="200", NO_COLOR="1", **extra)
    return env


def ledger_pids(path: Path) -> set[str]:
    if not path.exists():
        return set()
    return {line.split("\t")[0] for line in path.read_text().splitlines()}


def ledger_starts(path: Path, pid: str) -> int:
    if not path.exists():
        return 0
    rows = [line.split("\t") for line in path.read_text().splitlines()]
    return sum(1 for r in rows if r[0] == pid and r[3] == "start")


def journal_steps(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            row = conn.execute("SELECT count(*) FROM kv WHERE key LIKE 'wf:%:j:%'").fetchone()
    except sqlite3.Error:
        return 0
    return int(row[0])


def wait_until(check: object, *, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def test_kill_9_on_the_pid_of_tasks_py_demo_kills_the_demo_itself(tmp_path: Path) -> None:
    db, ledger = tmp_path / "demo.db", tmp_path / "demo.ledger"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tasks.py"), "demo", "--fast", "--db", str(db)],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: journal_steps(db) >= 1, what="a committed step in the journal")
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # what `kill -9 $!` does in a shell
        proc.wait(timeout=10)
    # The pid the shell knows is the process that executed the activities: nothing survives.
    assert ledger_pids(ledger) == {str(proc.pid)}

    again = subprocess.run(
        [*PYWEFT, "demo", "--fast", "--db", str(db)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "live pid" not in again.stdout  # nobody else was still running the steps
    ran = re.search(r"This process ran (\d+) activit", again.stdout)
    assert ran is not None, again.stdout
    # The summary counts what really ran here, as the ledger shows it.
    assert int(ran.group(1)) == ledger_starts(ledger, pid=_second_pid(ledger, proc.pid))
    assert int(ran.group(1)) > 0


def _second_pid(ledger: Path, first: int) -> str:
    (other,) = ledger_pids(ledger) - {str(first)}
    return other


def test_a_fresh_demo_summary_counts_every_activity_it_ran(tmp_path: Path) -> None:
    done = subprocess.run(
        [*PYWEFT, "demo", "--fast", "--orders", "2"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "This process ran 8 activities and replayed 0 step(s)" in done.stdout


def test_demo_ignores_pyweft_database_url_and_uses_its_own_file(tmp_path: Path) -> None:
    # The user's app store (here an unreachable PostgreSQL) is left alone.
    env = cli_env(PYWEFT_DATABASE_URL="postgresql://nobody@127.0.0.1:1/app")
    done = subprocess.run(
        [*PYWEFT, "demo", "--fast", "--orders", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "pyweft-demo.db").exists()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("memory://", "keeps nothing once the process exits"),
        ("postgresql://nobody@127.0.0.1:1/app", None),
    ],
)
def test_demo_on_a_store_it_cannot_use_says_why_truly(url: str, reason: str | None) -> None:
    done = subprocess.run(
        [*PYWEFT, "demo", "--fast", "--db", url],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "does not outlive the process" not in done.stderr
    assert "Traceback" not in done.stderr
    if reason is not None:
        assert reason in done.stderr


def _second_engine_is_refused(tmp_path: Path) -> bool:
    async def probe() -> bool:
        url = f"sqlite:///{tmp_path / 'probe.db'}"
        async with Engine(url):
            try:
                async with Engine(url):
                    return False
            except StoreInUseError:
                return True

    return asyncio.run(probe())


def test_a_second_demo_on_a_busy_database_says_plainly_what_to_do(tmp_path: Path) -> None:
    if not _second_engine_is_refused(tmp_path):
        pytest.skip("this build lets two engines open one SQLite file (no StoreInUseError yet)")
    db = tmp_path / "demo.db"
    first = subprocess.Popen(
        [*PYWEFT, "demo", "--db", str(db)],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: journal_steps(db) >= 1, what="the first demo to be running")
        second = subprocess.run(
            [*PYWEFT, "demo", "--db", str(db)],
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        first.kill()
        first.wait(timeout=10)
    assert second.returncode == 1
    assert "StoreInUseError" in second.stderr
    assert "still running" in second.stderr
    assert "Traceback" not in second.stderr
