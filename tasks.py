#!/usr/bin/env python3
"""Developer entry point that needs nothing but Python 3.11.

    python3 tasks.py demo    # set up .venv and run the demo workflow on SQLite
    python3 tasks.py test    # set up .venv and run the whole test suite (see below)
    python3 tasks.py lint    # ruff + mypy --strict
    python3 tasks.py wheel-check  # build sdist + wheel, install the wheel in a clean venv, smoke it

Each command creates ``.venv`` (once) and installs the project with its
development dependencies before running, so a fresh clone needs no other step.

``test`` with no arguments runs two passes: the whole suite (engine tests on
memory and SQLite), then the integration tier again with the engine tests on
PostgreSQL (``PYWEFT_TEST_STORAGE=postgres``, server at
``$PYWEFT_TEST_POSTGRES_URL``). The second pass is skipped with a notice when
no server answers, unless ``PYWEFT_REQUIRE_POSTGRES=1``, which makes that a
failure. With arguments, ``test`` is plain pytest with those arguments.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import venv
import zipfile
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
    if not argv or argv[0] not in {"demo", "test", "lint", "wheel-check"}:
        print(__doc__)
        return 2
    ensure_venv()
    cmd, rest = argv[0], argv[1:]
    if cmd == "demo":
        # Hand this process over to the demo (same pid), so that `kill -9 $!` or Ctrl-C
        # reaches the demo itself rather than a wrapper that would leave it running.
        demo = [str(BIN / "pyweft"), "demo", *rest]
        print("+", " ".join(demo), flush=True)
        if os.name == "nt":  # no real exec there: wait for the child instead
            return _run(*demo)
        os.chdir(ROOT)
        os.execv(demo[0], demo)
    if cmd == "wheel-check":
        return wheel_check()
    if cmd == "lint":
        rc = _run(PY, "-m", "ruff", "check", "src", "tests", "benchmarks")
        rc |= _run(PY, "-m", "ruff", "format", "--check", "src", "tests", "benchmarks")
        return rc | _run(PY, "-m", "mypy")
    return test(rest)


def test(args: list[str]) -> int:
    # Each pass ends with pytest's own summary line (with its time), so the last
    # line of the output is always a test runner's verdict.
    rc = _run(PY, "-m", "pytest", *args)
    if not args and os.environ.get("PYWEFT_TEST_STORAGE", "").strip().lower() != "postgres":
        rc = _postgres_pass() or rc
    return rc


_WHEEL_METADATA = (
    "License-Expression: Apache-2.0",
    "Classifier: Typing :: Typed",
    "Project-URL: Documentation",
    "Provides-Extra: postgres",
    "Provides-Extra: pydantic",
)


def wheel_check() -> int:
    """Build the sdist and wheel, install the wheel in a fresh venv away from the source
    tree, and run ``pyweft demo --fast`` and ``pyweft doctor`` from there."""
    with tempfile.TemporaryDirectory(prefix="pyweft-wheel-") as tmp:
        work = Path(tmp)
        dist = work / "dist"
        if _run(PY, "-m", "build", "--sdist", "--wheel", "--outdir", dist, ROOT) != 0:
            return 1
        (wheel,) = dist.glob("pyweft-*.whl")
        problems = _wheel_problems(wheel)
        for problem in problems:
            print(f"FAILED: {problem}", flush=True)
        if problems:
            return 1
        env_dir = work / "venv"
        venv.EnvBuilder(with_pip=True).create(env_dir)
        bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYWEFT_", "PYTHON"))}
        clean["VIRTUAL_ENV"] = str(env_dir)
        steps: list[list[str | Path]] = [
            [bin_dir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
             f"{wheel}[postgres]"],
            [bin_dir / "pyweft", "--version"],
            [bin_dir / "pyweft", "demo", "--fast", "--orders", "1"],
            [bin_dir / "pyweft", "doctor", "--db", "sqlite:///pyweft-demo.db"],
            [bin_dir / "python", "-c", "import pyweft, pathlib; "
             f"assert not pathlib.Path(pyweft.__file__).is_relative_to(r'{ROOT}'); "
             "print('pyweft', pyweft.__version__, 'from', pathlib.Path(pyweft.__file__).parent)"],
        ]  # fmt: skip
        for step in steps:
            print("+", " ".join(str(c) for c in step), flush=True)
            if subprocess.call([str(c) for c in step], cwd=work, env=clean) != 0:
                print("FAILED: the installed wheel does not work", flush=True)
                return 1
    print("wheel-check: OK", flush=True)
    return 0


def _wheel_problems(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = zf.read(meta).decode()
    problems = [f"{wheel.name} lacks pyweft/py.typed"] if "pyweft/py.typed" not in names else []
    problems += [f"METADATA lacks {line!r}" for line in _WHEEL_METADATA if line not in metadata]
    problems += [f"{wheel.name} ships tests" for n in names if n.startswith("tests/")][:1]
    return problems


def _postgres_pass() -> int:
    """Engine tests again on PostgreSQL (memory + postgres), if a server answers."""
    probe = (
        "import sys; sys.path.insert(0, 'tests'); "
        "from support.backends import postgres_unreachable_reason as r; print(r() or '')"
    )
    found = subprocess.run(
        [str(PY), "-c", probe], cwd=ROOT, capture_output=True, text=True, check=False
    )
    reason = found.stdout.strip() or (found.stderr.strip().splitlines() or [""])[-1]
    if found.returncode != 0 or reason:
        if os.environ.get("PYWEFT_REQUIRE_POSTGRES", "").strip() not in ("", "0"):
            print(f"FAILED: PYWEFT_REQUIRE_POSTGRES is set but {reason}", flush=True)
            return 1
        print(f"skipping the PostgreSQL pass: {reason}", flush=True)
        return 0
    env = {**os.environ, "PYWEFT_TEST_STORAGE": "postgres"}
    print("pass 2: the engine tests again, on PostgreSQL", flush=True)
    # The adapters' own tests ran in pass 1 already; this pass is about the engine.
    rc = _run(
        PY, "-m", "pytest", "tests/integration",
        "--ignore=tests/integration/test_storage_sqlite.py",
        "--ignore=tests/integration/test_storage_postgres.py", env=env,
    )  # fmt: skip
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
