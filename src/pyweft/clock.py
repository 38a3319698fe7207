"""Time, injected: the engine never reads the wall clock or sleeps directly.

``SystemClock`` is the real thing. ``VirtualClock`` lets tests move time
forward instantly: timers fire when the test calls ``advance``, in due order,
without waiting.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Wall-clock time in epoch seconds plus one-shot callbacks at a given time."""

    def now(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` on the event loop once ``now() >= when``."""
        ...


class SystemClock:
    """The real clock. Timers use the loop's monotonic scheduler and re-check the
    wall clock when they fire, so a wall-clock step backwards cannot fire early."""

    def now(self) -> float:
        return time.time()

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        return _SystemTimer(self, when, callback)


class _SystemTimer:
    __slots__ = ("_callback", "_clock", "_handle", "_when")

    def __init__(self, clock: SystemClock, when: float, callback: Callable[[], None]) -> None:
        self._clock = clock
        self._when = when
        self._callback = callback
        self._handle: asyncio.TimerHandle | asyncio.Handle | None = None
        self._arm()

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self._when - self._clock.now()
        if delay <= 0:
            self._handle = loop.call_soon(self._callback)
        else:
            self._handle = loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        if self._clock.now() < self._when:
            self._arm()
        else:
            self._callback()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class VirtualClock:
    """A clock that only moves when told to. For tests and the test kit."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)
        self._heap: list[tuple[float, int, _VirtualTimer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        timer = _VirtualTimer(callback)
        if when <= self._now:
            asyncio.get_running_loop().call_soon(timer.fire)
        else:
            heapq.heappush(self._heap, (when, next(self._seq), timer))
        return timer

    def pending_timers(self) -> int:
        """How many armed, uncancelled timers are waiting for time to pass."""
        return sum(1 for _, _, t in self._heap if not t.cancelled)

    def next_deadline(self) -> float | None:
        live = [w for w, _, t in self._heap if not t.cancelled]
        return min(live) if live else None

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` and fire every timer now due, in order."""
        if seconds < 0:
            raise ValueError("a clock cannot move backwards")
        self.advance_to(self._now + seconds)

    def advance_to(self, when: float) -> None:
        while self._heap and self._heap[0][0] <= when:
            due, _, timer = heapq.heappop(self._heap)
            self._now = max(self._now, due)
            timer.fire()
        self._now = max(self._now, when)


class _VirtualTimer:
    __slots__ = ("_callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self.cancelled = False

    def fire(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self._callback()

    def cancel(self) -> None:
        self.cancelled = True
