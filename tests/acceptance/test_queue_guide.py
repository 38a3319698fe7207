"""The workflow-queue guide's example runs as written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.guides import block


def test_queues_guide_example_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / "example.py").write_text(block("queues"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
    done = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("already queued as ")
    assert lines[-1] == "10 [10, 10, 10, 10, 10]"
