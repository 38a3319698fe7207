from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Shared helpers live in tests/support; make them importable as `support`.
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("PYWEFT_TEST", "1")


def pytest_report_header(config: pytest.Config) -> str:
    from support.backends import durable_backend

    return f"engine tests run on memory and {durable_backend()} (PYWEFT_TEST_STORAGE)"
