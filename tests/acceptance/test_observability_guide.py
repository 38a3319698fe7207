"""docs/guides/observability.md: every Python example runs as written and prints what
the guide says it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("index", range(len(EXPECTED)))
def test_guide_example_runs_and_prints_what_it_says(index: int, tmp_path: Path) -> None:
    code = BLOCK.findall(GUIDE.read_text())[index]
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYWEFT_")}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == EXPECTED[index]
