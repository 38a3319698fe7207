"""The second-instance detector warns about a live peer, and only then."""

from __future__ import annotations

import asyncio
import json
import warnings

import pytest

from pyweft import ConfigurationError, Engine, MemoryStorage, SecondInstanceWarning, VirtualClock
from pyweft.engine.ownership.detector import SecondInstanceDetector
from pyweft.storage.base import Put


async def ticks(*detectors: SecondInstanceDetector, rounds: int) -> None:
    for _ in range(rounds):
        for d in detectors:
            await d.tick()


async def test_two_live_instances_warn_after_two_advances() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    a = SecondInstanceDetector(storage, clock, "a", interval_s=15)
    b = SecondInstanceDetector(storage, clock, "b", interval_s=15)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await ticks(a, b, rounds=2)
        assert not caught  # one advance is not enough
        await ticks(a, b, rounds=2)
    peers = {str(w.message).split("(")[1].split(")")[0] for w in caught}
    assert peers == {"a", "b"} and len(caught) == 2  # each warns once about the other
    assert all(issubclass(w.category, SecondInstanceWarning) for w in caught)
    await a.stop()
    await b.stop()
    assert await storage.scan("liveness:") == []


async def test_a_stopped_peer_and_spoofed_records_do_not_warn() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    a = SecondInstanceDetector(storage, clock, "a")
    old = SecondInstanceDetector(storage, clock, "old")
    await old.tick()
    await old.stop()
    spoof = {"instance_id": "x", "heartbeat_at": 0, "sequence": 1}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(5):
            spoof["sequence"] = n + 1
            await storage.batch([Put(key="liveness:y", value=json.dumps(spoof).encode())])
            await a.tick()
    assert caught == []
    await a.stop()


async def test_engines_run_the_detector_when_asked() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    with pytest.raises(ConfigurationError):
        Engine(storage, ownership="workflow-lease", detect_second_instance=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with (
            Engine(storage, clock=clock, detect_second_instance=True),
            Engine(storage, clock=clock, detect_second_instance=True),
        ):
            for _ in range(4):
                clock.advance(15)
                for _ in range(20):
                    await asyncio.sleep(0)
    assert any(issubclass(w.category, SecondInstanceWarning) for w in caught)


async def test_an_incident_warns_once_through_warnings_and_never_through_logging(
    caplog: pytest.LogCaptureFixture,
) -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    a = SecondInstanceDetector(storage, clock, "a")
    b = SecondInstanceDetector(storage, clock, "b")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await ticks(a, b, rounds=10)  # a long incident: still one warning each
    assert sorted(str(w.message).split("(")[1].split(")")[0] for w in caught) == ["a", "b"]
    assert [r for r in caplog.records if r.name == "pyweft.detector"] == []
    await a.stop()
    await b.stop()


async def test_a_peer_that_leaves_and_comes_back_is_a_new_incident() -> None:
    storage, clock = MemoryStorage(), VirtualClock()
    a = SecondInstanceDetector(storage, clock, "a")
    b = SecondInstanceDetector(storage, clock, "b")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await ticks(a, b, rounds=3)
        await b.stop()  # b goes away: its heartbeat is deleted
        await ticks(a, rounds=2)
        first_incident = [w for w in caught if "(b)" in str(w.message)]
        back = SecondInstanceDetector(storage, clock, "b")
        await ticks(a, back, rounds=3)
    assert len(first_incident) == 1
    assert len([w for w in caught if "(b)" in str(w.message)]) == 2
    await a.stop()
    await back.stop()


def test_the_detector_is_refused_where_it_cannot_apply() -> None:
    storage = MemoryStorage()
    with pytest.raises(ConfigurationError, match="role='client'"):
        Engine(storage, role="client", detect_second_instance=True)
