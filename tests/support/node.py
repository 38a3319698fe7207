"""Node.js for the tests that run JavaScript workers: skipped without it, except under
``PYWEFT_REQUIRE_NODE=1`` (CI), where a missing ``node`` fails the test."""

from __future__ import annotations

import os
import shutil

import pytest


def node_or_skip() -> str:
    found = shutil.which("node")
    if found is None:
        if os.environ.get("PYWEFT_REQUIRE_NODE") == "1":
            pytest.fail("PYWEFT_REQUIRE_NODE=1 but no `node` is on PATH")
        pytest.skip("node is not installed (set PYWEFT_REQUIRE_NODE=1 to make this fail)")
    return found
