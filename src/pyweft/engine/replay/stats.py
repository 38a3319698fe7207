"""``engine.stats()``: counters an operator watches to see how an engine is coping."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineStats:
    """A snapshot of one engine's counters (since it opened)."""

    runs_driven: int
    """Runs this engine drives right now."""
    storage_failures: int
    """Runs torn down by a storage failure (counted once per run per incident)."""
    redriven: int
    """Runs this engine resumed from their journal after such a failure."""
    stranded: int
    """Runs waiting right now for the store to answer again before they resume."""
