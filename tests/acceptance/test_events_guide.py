"""The events-and-streams guide's examples run as written and print what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.guides import block


def _run(code: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_events_and_streams_example_prints_status_tokens_and_result(tmp_path: Path) -> None:
    out = _run(block("events-and-streams", 1), tmp_path).splitlines()
    assert out[0] in ("status: thinking", "status: done")
    assert out[1:6] == [f"token: {w}" for w in ["why", "is", "the", "sky", "blue"]]
    assert out[6:] == ["result: why is the sky blue", "status: done"]


def test_update_with_start_example_counts_both_items(tmp_path: Path) -> None:
    assert _run(block("events-and-streams", 2), tmp_path) == "items in cart: 2\n"
