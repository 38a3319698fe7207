"""``Queue``: a named workflow queue and its limits, checked when it is made."""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass, field

import msgspec

from pyweft.definitions import Duration
from pyweft.durations import format_duration, parse_duration
from pyweft.engine.replay import keys
from pyweft.errors import InvalidArgumentError, InvalidDurationError

PRIORITY_MIN = 0
PRIORITY_MAX = 2**31 - 1
"""Priorities run from 0 (first) to 2**31 - 1; runs enqueued without one get 0."""

MIN_RATE_WINDOW_S = 0.001
"""The shortest rate-limit window: start times are compared at millisecond resolution
at best (timers, and clocks on some systems, are coarser still), so a shorter window
could not be enforced as written."""

MAX_NAME_BYTES = 200


@dataclass(frozen=True, slots=True)
class Queue:
    """A workflow queue. Pass it to ``Engine(queues=[...])`` (or ``register_queue``),
    then ``await engine.enqueue(queue, wf, *args)``.

    ``concurrency``: runs of this queue running at once across every engine on the
    store (``None``: no limit). ``worker_concurrency``: runs this engine starts from the
    queue that are still running. ``rate_limit=(n, window)``: at most ``n`` starts in
    any ``window`` (seconds, ``timedelta`` or ``"30s"``). ``priority``: enqueue accepts
    ``priority=`` (lower starts first, first in first out within a priority).
    ``partitioned``: enqueue requires ``partition_key=``, and each key gets the limits
    for itself (its own concurrency, rate and worker concurrency).
    """

    name: str
    _: KW_ONLY
    concurrency: int | None = None
    worker_concurrency: int | None = None
    rate_limit: tuple[int, Duration] | None = None
    priority: bool = False
    partitioned: bool = False
    rate_window_s: float | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_name(self.name)
        _check_limit(self.concurrency, "concurrency", self.name)
        _check_limit(self.worker_concurrency, "worker_concurrency", self.name)
        for flag in ("priority", "partitioned"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidArgumentError(
                    f"queue {self.name!r}: {flag} must be True or False, "
                    f"got {getattr(self, flag)!r}"
                )
        if self.rate_limit is not None:
            object.__setattr__(self, "rate_window_s", _check_rate(self.rate_limit, self.name))

    @property
    def rate_count(self) -> int | None:
        return None if self.rate_limit is None else self.rate_limit[0]

    def describe_limits(self) -> str:
        parts = [
            f"concurrency {self.concurrency or 'unlimited'}",
            f"per engine {self.worker_concurrency or 'unlimited'}",
        ]
        if self.rate_limit is not None and self.rate_window_s is not None:
            parts.append(f"rate {self.rate_limit[0]}/{format_duration(self.rate_window_s)}")
        return ", ".join(parts)


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"a queue name must be a non-empty string, got {name!r}")
    return keys.check_text(name, "queue name", MAX_NAME_BYTES)


def _check_limit(value: object, what: str, name: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(
            f"queue {name!r}: {what} must be a whole number of at least 1 (or None for no "
            f"limit), got {value!r}"
        )


def _check_rate(rate: object, name: str) -> float:
    if not isinstance(rate, tuple) or len(rate) != 2:
        raise InvalidArgumentError(
            f"queue {name!r}: rate_limit must be a pair (starts, window), e.g. (50, '30s'), "
            f"got {rate!r}"
        )
    count, window = rate
    _check_limit(count, "rate_limit's number of starts", name)
    if isinstance(window, float) and math.isnan(window):
        raise InvalidArgumentError(f"queue {name!r}: rate_limit's window is NaN")
    try:
        seconds = parse_duration(window, field=f"rate_limit window of queue {name!r}")
    except InvalidDurationError as exc:
        raise InvalidArgumentError(str(exc)) from exc
    if seconds < MIN_RATE_WINDOW_S:
        raise InvalidArgumentError(
            f"queue {name!r}: rate_limit's window {window!r} is shorter than the clock "
            f"resolution the limit is counted at ({MIN_RATE_WINDOW_S * 1000:g} ms); use a "
            "window of at least 1ms (and a count to match)"
        )
    return seconds


def check_priority(queue: Queue, priority: object) -> int:
    if priority is None:
        return PRIORITY_MIN
    if not queue.priority:
        raise InvalidArgumentError(
            f"queue {queue.name!r} does not order by priority, so priority= is refused; "
            "declare it with Queue(..., priority=True)"
        )
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidArgumentError(f"priority must be a whole number, got {priority!r}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise InvalidArgumentError(
            f"priority {priority} is out of range: use {PRIORITY_MIN} (first) to "
            f"{PRIORITY_MAX} (last)"
        )
    return priority


def check_partition(queue: Queue, partition_key: object) -> str:
    if queue.partitioned:
        if partition_key is None:
            raise InvalidArgumentError(
                f"queue {queue.name!r} is partitioned: pass partition_key= to enqueue"
            )
        if not isinstance(partition_key, str) or not partition_key:
            raise InvalidArgumentError(
                f"partition_key must be a non-empty string, got {partition_key!r}"
            )
        return keys.check_text(partition_key, "partition_key", MAX_NAME_BYTES)
    if partition_key is not None:
        raise InvalidArgumentError(
            f"queue {queue.name!r} is not partitioned, so partition_key= is refused; "
            "declare it with Queue(..., partitioned=True)"
        )
    return ""


class StoredQueue(msgspec.Struct, array_like=True):
    """A queue's definition as kept in the store, for inspection from any process."""

    name: str
    concurrency: int | None
    worker_concurrency: int | None
    rate_count: int | None
    rate_window_s: float | None
    priority: bool
    partitioned: bool


def to_stored(queue: Queue) -> StoredQueue:
    return StoredQueue(
        name=queue.name,
        concurrency=queue.concurrency,
        worker_concurrency=queue.worker_concurrency,
        rate_count=queue.rate_count,
        rate_window_s=queue.rate_window_s,
        priority=queue.priority,
        partitioned=queue.partitioned,
    )
