"""``engine.metrics_text()``: the engine's own gauges and its interceptors' metrics as
Prometheus text, and the commit-latency observer handed to the engine's committer."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pyweft.observability.metrics import gauge_lines

if TYPE_CHECKING:
    from pyweft.engine.ownership.lease import LeaseHealth
    from pyweft.engine.replay.stats import EngineStats
    from pyweft.observability.chain import InterceptorChain

LEASE_STATES = ("no-lease", "healthy", "contested")


def prometheus_text(stats: EngineStats, lease: LeaseHealth, chain: InterceptorChain | None) -> str:
    lines = [
        *gauge_lines(
            "pyweft_engine_runs_driven", "Runs this engine drives now.", [((), stats.runs_driven)]
        ),
        *gauge_lines(
            "pyweft_engine_storage_failures",
            "Storage failures that stopped a run here (re-driven later).",
            [((), stats.storage_failures)],
        ),
        *gauge_lines(
            "pyweft_engine_runs_redriven",
            "Runs re-driven after a storage failure.",
            [((), stats.redriven)],
        ),
        *gauge_lines(
            "pyweft_engine_runs_stranded",
            "Runs waiting for the store to answer before they resume.",
            [((), stats.stranded)],
        ),
        *gauge_lines(
            "pyweft_lease_state",
            "The store lease as this engine sees it (1 for the current state).",
            [((("state", s),), 1.0 if lease.state == s else 0.0) for s in LEASE_STATES],
        ),
    ]
    text = "\n".join(lines) + "\n"
    for icpt in chain.interceptors if chain is not None else ():
        render = getattr(icpt, "prometheus_text", None)
        if callable(render):
            text += str(render())
    return text


def commit_observer(chain: InterceptorChain | None) -> Callable[[float], None] | None:
    """The interceptors' ``observe_commit`` methods as one callable (``None`` if none)."""
    observers = [
        observe
        for icpt in (chain.interceptors if chain is not None else ())
        if callable(observe := getattr(icpt, "observe_commit", None))
    ]
    if not observers:
        return None
    if len(observers) == 1:
        return observers[0]  # type: ignore[no-any-return]

    def observe_all(seconds: float) -> None:
        for observe in observers:
            observe(seconds)

    return observe_all
