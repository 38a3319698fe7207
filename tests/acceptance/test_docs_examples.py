"""The README's and the quickstart's Python examples run as written, and survive a kill -9."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(doc: Path) -> list[str]:
    return BLOCK.findall(doc.read_text())


def script_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_script(code: str, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    path = cwd / "example.py"
    path.write_text(code)
    return subprocess.run(
        [sys.executable, str(path)], cwd=cwd, env=script_env(), capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip


def journal_steps(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            row = conn.execute("SELECT count(*) FROM kv WHERE key LIKE 'wf:%:j:%'").fetchone()
    except sqlite3.Error:
        return 0
    return int(row[0])


def test_every_readme_python_block_runs_as_written(tmp_path: Path) -> None:
    blocks = python_blocks(ROOT / "README.md")
    assert blocks, "the README has no python example"
    for n, code in enumerate(blocks):
        done = run_script(code, tmp_path)
        assert done.returncode == 0, f"README block {n}:\n{done.stdout}\n{done.stderr}"
    assert "receipt-o-1" in done.stdout


def test_quickstart_python_blocks_run_in_order_as_one_script(tmp_path: Path) -> None:
    blocks = python_blocks(ROOT / "docs" / "quickstart.md")
    assert len(blocks) >= 3
    done = run_script("\n\n".join(blocks), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "'reservation': 'reservation-A1-2'" in done.stdout
    assert "order-42" in done.stdout
    # A rerun (the restart case the quickstart advertises) awaits the same run.
    again = run_script("\n\n".join(blocks), tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr


def test_the_readme_example_rerun_after_sigkill_finishes_the_same_run(tmp_path: Path) -> None:
    (headline,) = [b for b in python_blocks(ROOT / "README.md") if "checkout" in b]
    script = tmp_path / "shop.py"
    script.write_text(headline)
    with (tmp_path / "first.out").open("w") as out:
        first = subprocess.Popen(
            [sys.executable, str(script)], cwd=tmp_path, env=script_env(), stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while journal_steps(tmp_path / "shop.db") < 1:  # charge is recorded: now asleep
                assert first.poll() is None, (tmp_path / "first.out").read_text()
                assert time.monotonic() < deadline, "no step was recorded within 30 s"
                time.sleep(0.01)
        finally:
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=10)
    assert first.returncode == -signal.SIGKILL
    assert "receipt-o-1" not in (tmp_path / "first.out").read_text()

    again = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=script_env(), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.strip().endswith("receipt-o-1")
    assert "charging o-1" not in again.stdout  # the recorded charge is not repeated
    assert "to ada@example.com: How was order o-1?" in again.stdout
