"""docs/guides/observability.md: every Python example runs as written and prints what
the guide says it prints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "observability.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
EXPECTED = [
    ["hello ada from acme (r-42)", "['sleep', 'activity greet']"],
    [
        "charged 12",
        "['POST /checkout', 'activity charge', 'activity charge', 'run checkout', "
        "'start checkout']",
        "['pyweft_activity_retries_total{activity=\"charge\"} 1.0']",
    ],
    ["worker runs thumbnail for acme", "cat.png.thumb for acme", "1"],
    [
        "failed application",
        "[('application', 1)]",
        "reserve attempt 1 application acme",
        "reserve attempt 2 application acme",
        "run o-1 failed application acme",
    ],
    [],
    ["False", "1111 0004", "<encrypted: aes-gcm, key 2025>"],
]


def test_the_guide_has_the_examples_this_test_checks() -> None:
    assert len(BLOCK.findall(GUIDE.read_text())) == len(EXPECTED)


RUNNER = """
import contextlib, io, json, sys
out = []
for code in json.load(sys.stdin):
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(compile(code, "example.py", "exec"), {"__name__": "__main__"})
    out.append(buffer.getvalue().splitlines())
print(json.dumps(out))
"""


def test_guide_examples_run_and_print_what_they_say(tmp_path: Path) -> None:
    """Every example in one fresh interpreter (each in its own namespace and event loop)."""
    blocks = BLOCK.findall(GUIDE.read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER], input=json.dumps(blocks), cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout.splitlines()[-1])
    for index, (got, expected) in enumerate(zip(printed, EXPECTED, strict=True)):
        assert got == expected, f"example {index + 1}"
