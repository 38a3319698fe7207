from __future__ import annotations

import os
import sys
from pathlib import Path

# Imported now, not lazily by hypothesis's pytest plugin at the terminal summary: on
# CPython 3.11.7 a test that hit the recursion limit earlier can make that late import
# fail its assertion rewriting with "SystemError: AST constructor recursion depth
# mismatch" (CPython gh-106905), which ends the whole session with INTERNALERROR.
import hypothesis.internal.observability  # noqa: F401
import pytest

# Shared helpers live in tests/support; make them importable as `support`.
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("PYWEFT_TEST", "1")


def pytest_report_header(config: pytest.Config) -> str:
    from support.backends import durable_backend

    return f"engine tests run on memory and {durable_backend()} (PYWEFT_TEST_STORAGE)"
