"""The async update handler example of the queries-and-updates guide runs as written and
prints what the guide says it prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.guides import block


def test_the_async_update_handler_example_books_and_fails_as_documented(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(block("queries-and-updates", 4))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "ticket-A1",
        "ValueError row Z is closed",
        "['ticket-A1']",
    ]
