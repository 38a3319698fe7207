"""Helpers for testing code built on pyweft, and for testing pyweft adapters."""

from __future__ import annotations

import pytest

# The conformance suite asserts from inside this package; let pytest rewrite
# those asserts so a failure shows the values involved, as in a test module.
pytest.register_assert_rewrite("pyweft.testing.conformance")

from pyweft.testing.conformance import StorageConformance  # noqa: E402

__all__ = ["StorageConformance"]
