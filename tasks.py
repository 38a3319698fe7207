#!/usr/bin/env python3
"""Developer entry point that needs nothing but Python 3.11.

    python3 tasks.py demo    # set up .venv and run the demo workflow on SQLite
    python3 tasks.py test    # set up .venv and run the whole test suite
    python3 tasks.py lint    # ruff + mypy --strict

Each command creates ``.venv`` (once) and installs the project with its
development dependencies before running, so a fresh clone needs no other step.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".pyweft-installed"


def _run(*cmd: str | Path, env: dict[str, str] | None = None) -> int:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.call([str(c) for c in cmd], cwd=ROOT, env=env)


def ensure_venv() -> None:
    if not PY.exists():
        print(f"creating virtualenv in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == digest:
        return
    pip = [PY, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    if _run(*pip, "--upgrade", "pip") != 0 or _run(*pip, "-e", ".[dev]") != 0:
        sys.exit("dependency installation failed")
    STAMP.write_text(digest)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"demo", "test", "lint"}:
        print(__doc__)
        return 2
    ensure_venv()
    cmd, rest = argv[0], argv[1:]
    if cmd == "demo":
        return _run(BIN / "pyweft", "demo", *rest)
    if cmd == "lint":
        rc = _run(PY, "-m", "ruff", "check", "src", "tests", "benchmarks")
        rc |= _run(PY, "-m", "ruff", "format", "--check", "src", "tests", "benchmarks")
        return rc | _run(PY, "-m", "mypy")
    return _run(PY, "-m", "pytest", *rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
