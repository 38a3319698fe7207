"""The typed API, as type checkers see it: ``mypy --strict`` and pyright's strict mode.

``correct_calls.py`` must check cleanly (its ``assert_type`` lines pin the
inferred result types); in ``wrong_calls.py`` every line marked
``# expect-error`` must be reported by each checker, and no other line may be.
Both files are only type-checked, never imported or run.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CORRECT = HERE / "correct_calls.py"
WRONG = HERE / "wrong_calls.py"
MARKER = re.compile(r"#\s*expect-error\s*$")

pytestmark = pytest.mark.timeout(300)


@dataclass(frozen=True)
class Diagnostic:
    file: Path
    line: int  # 1-based
    text: str


def _expected_lines() -> set[int]:
    lines = WRONG.read_text().splitlines()
    return {n for n, text in enumerate(lines, start=1) if MARKER.search(text)}


@functools.cache
def _mypy() -> tuple[Diagnostic, ...]:
    options = ["--strict", "--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary"]
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", *options, str(CORRECT), str(WRONG)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    if proc.returncode not in (0, 1) or proc.stderr.strip():
        pytest.fail(f"mypy did not run (exit {proc.returncode}):\n{proc.stderr}{proc.stdout}")
    found = []
    for row in proc.stdout.splitlines():
        m = re.match(r"^(?P<file>[^:]+):(?P<line>\d+): error: (?P<text>.*)$", row)
        if m:
            path = (ROOT / m["file"]).resolve()
            found.append(Diagnostic(path, int(m["line"]), m["text"]))
    return tuple(found)


def _pyright_or_skip() -> None:
    """The PyPI ``pyright`` runs its bundled checker on a Node.js it finds on PATH; without
    one it would try to download Node, which this test must never do."""
    if shutil.which("node") is not None:
        return
    reason = "pyright needs Node.js on PATH (apt-get install nodejs)"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but {reason}", pytrace=False)
    pytest.skip(reason)


@functools.cache
def _pyright() -> tuple[Diagnostic, ...]:
    env = {**os.environ, "PYRIGHT_PYTHON_USE_BUNDLED_PYRIGHT": "1"}
    env.pop("PYRIGHT_PYTHON_FORCE_VERSION", None)  # another version would be fetched from npm
    options = ["--outputjson", "--pythonpath", sys.executable]
    proc = subprocess.run(
        [sys.executable, "-m", "pyright", *options, str(CORRECT), str(WRONG)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"pyright did not run (exit {proc.returncode}):\n{proc.stderr}{proc.stdout}")
    return tuple(
        Diagnostic(
            Path(d["file"]).resolve(),
            d["range"]["start"]["line"] + 1,
            f"{d['message']} ({d.get('rule', '')})",
        )
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    )


def _in(found: tuple[Diagnostic, ...], file: Path) -> list[Diagnostic]:
    return [d for d in found if d.file == file]


def _show(found: list[Diagnostic]) -> str:
    return "\n".join(f"  {d.file.name}:{d.line}: {d.text}" for d in found) or "  (none)"


def _check_wrong_calls(found: tuple[Diagnostic, ...]) -> None:
    expected = _expected_lines()
    assert len(expected) >= 30, "wrong_calls.py lost its # expect-error markers"
    errors = _in(found, WRONG)
    missed = sorted(expected - {d.line for d in errors})
    stray = [d for d in errors if d.line not in expected]
    source = WRONG.read_text().splitlines()
    assert not missed, "no error reported on these wrong calls:\n" + "\n".join(
        f"  wrong_calls.py:{n}: {source[n - 1].strip()}" for n in missed
    )
    assert not stray, "errors on lines not marked # expect-error:\n" + _show(stray)


def test_correct_calls_pass_mypy_strict_with_their_inferred_types() -> None:
    errors = _in(_mypy(), CORRECT)
    assert not errors, "mypy --strict refused correct calls:\n" + _show(errors)


def test_every_wrong_call_is_reported_by_mypy_strict_and_nothing_else() -> None:
    _check_wrong_calls(_mypy())


def test_correct_calls_pass_pyright_strict_with_their_inferred_types() -> None:
    _pyright_or_skip()
    errors = _in(_pyright(), CORRECT)
    assert not errors, "pyright (strict) refused correct calls:\n" + _show(errors)


def test_every_wrong_call_is_reported_by_pyright_strict_and_nothing_else() -> None:
    _pyright_or_skip()
    _check_wrong_calls(_pyright())
