"""Bad queue definitions and bad enqueue arguments: typed errors, nothing stored."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pyweft import (
    ConfigurationError,
    Engine,
    InvalidArgumentError,
    InvalidDurationError,
    MemoryStorage,
    Queue,
    QueueNotFoundError,
    WorkflowAlreadyExistsError,
    WorkflowContext,
    workflow,
)


@workflow
async def noop(ctx: WorkflowContext) -> None:
    return None


@pytest.mark.parametrize(
    "options",
    [
        {"concurrency": 0},
        {"concurrency": -3},
        {"concurrency": 2.5},
        {"concurrency": True},
        {"worker_concurrency": 0},
        {"rate_limit": (0, "1s")},
        {"rate_limit": (-1, "1s")},
        {"rate_limit": (5, math.nan)},
        {"rate_limit": (5, -1)},
        {"rate_limit": (5, "soon")},
        {"rate_limit": (5, 0.0001)},  # shorter than the clock resolution
        {"rate_limit": (5, 0)},
        {"rate_limit": 5},
        {"priority": "yes"},
    ],
)
def test_invalid_limits_are_refused_when_the_queue_is_made(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        Queue("q", **options)
    assert "q" in str(err.value)


@pytest.mark.parametrize("name", ["", 7, "bad\x00name"])
def test_a_bad_queue_name_is_refused(name: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        Queue(name)


def test_two_different_queues_under_one_name_are_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        Engine("memory://", queues=[Queue("q", concurrency=1), Queue("q", concurrency=2)])
    with pytest.raises(ConfigurationError):
        Engine("memory://", queues=Queue("q"))  # type: ignore[arg-type]


async def _refused(engine: Engine, error: type[Exception], *args: Any, **kwargs: Any) -> None:
    with pytest.raises(error):
        await engine.enqueue(*args, **kwargs)
    assert (await engine.list()).items == []  # nothing stored


async def test_bad_enqueues_are_refused_and_store_nothing() -> None:
    plain = Queue("plain")
    ranked = Queue("ranked", priority=True)
    parts = Queue("parts", partitioned=True)
    async with Engine(MemoryStorage(), workflows=[noop], queues=[plain, ranked, parts]) as eng:
        await _refused(eng, QueueNotFoundError, "nope", noop)
        await _refused(eng, QueueNotFoundError, Queue("plain", concurrency=3), noop)
        await _refused(eng, InvalidArgumentError, plain, noop, priority=1)
        await _refused(eng, InvalidArgumentError, ranked, noop, priority=-1)
        await _refused(eng, InvalidArgumentError, ranked, noop, priority=2**31)
        await _refused(eng, InvalidArgumentError, ranked, noop, priority=1.5)
        await _refused(eng, InvalidArgumentError, ranked, noop, priority=True)
        await _refused(eng, InvalidArgumentError, parts, noop)
        await _refused(eng, InvalidArgumentError, parts, noop, partition_key="")
        await _refused(eng, InvalidArgumentError, plain, noop, partition_key="a")
        await _refused(eng, InvalidArgumentError, plain, noop, deduplication_id="")
        await _refused(eng, InvalidDurationError, plain, noop, delay=-5)
        await _refused(eng, InvalidDurationError, plain, noop, delay=math.nan)
        await _refused(eng, InvalidArgumentError, plain, noop, id="")
        await eng.enqueue(plain, noop, id="taken")
        with pytest.raises(WorkflowAlreadyExistsError):
            await eng.enqueue(plain, noop, id="taken")
        with pytest.raises(QueueNotFoundError):
            await eng.queue_info("nope")
