"""Helpers for testing code built on pyweft, and for testing pyweft adapters.

``TestEnv`` runs the real engine on a virtual clock with time skipping, activity
mocks and restarts (docs/guides/testing.md).

``FaultyStorage`` wraps a store and injects faults (failed reads and writes,
lost replies, delays, held writes) so code can be tested against a store that
misbehaves. ``StorageConformance`` needs pytest and is imported on first use, so the rest
of this package works without pytest installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyweft.clock import VirtualClock
from pyweft.testing.env import TestEnv
from pyweft.testing.faults import (
    FaultCounts,
    FaultyStorage,
    InjectedFaultError,
    PausedWrite,
    ScheduledFault,
)
from pyweft.testing.mocks import MockActivity, MockCall
from pyweft.testing.replay import ReplayResult, export_history, replay

if TYPE_CHECKING:
    from pyweft.testing.conformance import StorageConformance

__all__ = [
    "TestEnv",
    "MockActivity",
    "MockCall",
    "ReplayResult",
    "export_history",
    "replay",
    "VirtualClock",
    # storage faults
    "FaultyStorage",
    "FaultCounts",
    "InjectedFaultError",
    "PausedWrite",
    "ScheduledFault",
    # adapters
    "StorageConformance",
]


def __getattr__(name: str) -> Any:
    if name == "StorageConformance":
        import pytest

        # The suite asserts from inside this package; let pytest rewrite those
        # asserts so a failure shows the values involved, as in a test module.
        pytest.register_assert_rewrite("pyweft.testing.conformance")
        from pyweft.testing.conformance import StorageConformance

        return StorageConformance
    raise AttributeError(f"module 'pyweft.testing' has no attribute {name!r}")
