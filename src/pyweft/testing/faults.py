"""A storage wrapper that injects faults, for testing code against a store that misbehaves.

``FaultyStorage`` wraps any :class:`~pyweft.storage.base.Storage` and, under
the control of a test, makes some of its calls fail the way real stores do:

* a read (``get``/``scan``/``count``) or a write (``batch``/``conditional_batch``)
  raises :class:`InjectedFaultError` *before* it reaches the inner store;
* a write is applied to the inner store and then raises anyway, as when the
  reply of a commit that did happen is lost ("outcome unknown");
* a call is delayed (a real ``asyncio.sleep`` before or after it runs);
* a write matching a predicate is held at the door until the test releases
  or fails it (:meth:`FaultyStorage.pause_next_write`);
* the Nth read or write matching a predicate fails (:meth:`FaultyStorage.fail_nth_write`).

Random faults come from one ``random.Random(seed)`` that draws the same
number of values for every call, so the same sequence of calls meets the
same faults. :meth:`FaultyStorage.heal` turns everything off; :attr:`FaultyStorage.counts`
says how many faults of each kind were injected. Everything else the inner
store has (``listen``/``notify``, ``path``...) passes through untouched.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pyweft.errors import InvalidArgumentError, StorageError
from pyweft.storage.base import Expect, Op, Storage, StorageCapabilities

__all__ = [
    "FaultCounts",
    "FaultyStorage",
    "InjectedFaultError",
    "PausedWrite",
    "ScheduledFault",
]

T = TypeVar("T")
WriteMatch = Callable[[Sequence[Op]], bool]
"""Chooses writes by their ops (``Put``/``Delete``, each with a ``key``)."""
ReadMatch = Callable[[str], bool]
"""Chooses reads by the key of a ``get`` or the prefix of a ``scan``/``count``."""
Outcome = Literal["failed", "unknown"]


class InjectedFaultError(StorageError):
    """A fault injected by :class:`FaultyStorage`, not a real storage failure.

    ``outcome_unknown`` is ``True`` when the write *was* applied to the inner
    store before the error was raised (a lost reply), ``False`` when nothing
    reached the inner store. ``operation`` names the call (``"batch"``...).
    """

    def __init__(self, message: str, *, operation: str, outcome_unknown: bool) -> None:
        super().__init__(message)
        self.operation = operation
        self.outcome_unknown = outcome_unknown


@dataclass(frozen=True, kw_only=True, slots=True)
class FaultCounts:
    """How many calls the wrapper saw and how many faults of each kind it injected."""

    reads: int = 0
    """Reads seen (``get``, ``scan``, ``count``), faulted or not."""
    writes: int = 0
    """Writes seen (``batch``, ``conditional_batch``), faulted or not."""
    read_failures: int = 0
    """Reads that raised before reaching the inner store."""
    write_failures: int = 0
    """Writes that raised before reaching the inner store."""
    lost_replies: int = 0
    """Writes applied to the inner store that raised anyway (outcome unknown)."""
    delays: int = 0
    """Calls slowed down by a random delay."""
    pauses: int = 0
    """Writes held by :meth:`FaultyStorage.pause_next_write`."""

    @property
    def errors(self) -> int:
        """Faults the caller saw as an exception."""
        return self.read_failures + self.write_failures + self.lost_replies

    @property
    def total(self) -> int:
        """Every fault injected, of any kind."""
        return self.errors + self.delays + self.pauses


class ScheduledFault:
    """A fault armed for the Nth matching call; see :meth:`FaultyStorage.fail_nth_write`."""

    def __init__(
        self, *, n: int, match: Callable[[Any], bool] | None, outcome: Outcome, what: str
    ) -> None:
        self.remaining = n
        self.match = match
        self.outcome: Outcome = outcome
        self.what = what
        self.fired = False
        """``True`` once the fault has been injected."""
        self.cancelled = False

    def cancel(self) -> None:
        """Disarm the fault if it has not fired yet."""
        self.cancelled = True

    def _hit(self, subject: Any) -> bool:
        if self.fired or self.cancelled:
            return False
        if self.match is not None and not self.match(subject):
            return False
        self.remaining -= 1
        if self.remaining > 0:
            return False
        self.fired = True
        return True


class PausedWrite:
    """A write held before it reaches the inner store, until the test decides.

    Await :meth:`reached` to know the write arrived (its ``ops`` and
    ``conditions`` are then set), then call :meth:`release` to let it through
    or :meth:`fail` to make it raise. Deciding before the write arrives is
    allowed: it then proceeds (or fails) at once when it does.
    """

    def __init__(self, match: WriteMatch | None) -> None:
        self.match = match
        self.ops: Sequence[Op] | None = None
        """The held write's ops, once :meth:`reached`."""
        self.conditions: Sequence[Expect] = ()
        """The held write's conditions (empty for a plain ``batch``)."""
        self._arrived = asyncio.Event()
        self._decided = asyncio.Event()
        self._verdict: Outcome | Literal["release"] = "release"
        self.cancelled = False

    @property
    def is_reached(self) -> bool:
        """Whether a matching write has arrived (held or already decided)."""
        return self._arrived.is_set()

    async def reached(self, timeout: float | None = 10.0) -> None:
        """Wait until a matching write is held. ``TimeoutError`` after ``timeout`` seconds."""
        await asyncio.wait_for(self._arrived.wait(), timeout)

    def release(self) -> None:
        """Let the write through to the inner store."""
        self._decide("release")

    def fail(self, *, outcome_unknown: bool = False) -> None:
        """Make the write raise: before it reaches the store, or after it was applied."""
        self._decide("unknown" if outcome_unknown else "failed")

    def _decide(self, verdict: Outcome | Literal["release"]) -> None:
        if not self._decided.is_set():
            self._verdict = verdict
            self._decided.set()

    async def _hold(
        self, conditions: Sequence[Expect], ops: Sequence[Op]
    ) -> Outcome | Literal["release"]:
        self.conditions, self.ops = conditions, ops
        self._arrived.set()
        await self._decided.wait()
        return self._verdict


def _rate(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InvalidArgumentError(f"{name} must be a number between 0 and 1, got {value!r}")
    return float(value)


def _seconds(name: str, value: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise InvalidArgumentError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def _positive(name: str, value: int) -> int:
    if type(value) is not int or value < 1:
        raise InvalidArgumentError(f"{name} must be an int >= 1 (1 = the next one), got {value!r}")
    return value


class FaultyStorage:
    """Wraps ``inner`` and injects faults into its calls. It never closes ``inner`` by itself.

    Rates are probabilities per call, all ``0`` by default (a transparent
    wrapper): ``read_failure_rate`` for reads, ``write_failure_rate`` for a
    write failing before it is applied, ``lost_reply_rate`` for a write
    applied and then reported failed (their sum must not exceed 1),
    ``delay_rate`` for a call delayed by up to ``max_delay_s`` seconds.
    ``seed`` makes random faults reproducible. Change rates later with
    :meth:`configure`; stop every fault with :meth:`heal`.

    Example::

        faults = FaultyStorage(MemoryStorage(), seed=7, write_failure_rate=0.05)
        async with Engine(faults, workflows=[checkout]) as engine:
            ...
        faults.heal()
        print(faults.counts.errors, "errors injected")
    """

    def __init__(
        self,
        inner: Storage,
        *,
        seed: int = 0,
        read_failure_rate: float = 0.0,
        write_failure_rate: float = 0.0,
        lost_reply_rate: float = 0.0,
        delay_rate: float = 0.0,
        max_delay_s: float = 0.01,
    ) -> None:
        if not isinstance(inner, Storage):
            raise InvalidArgumentError(
                f"FaultyStorage wraps a Storage (get, scan, batch, conditional_batch, close, "
                f"capabilities), got {inner!r}"
            )
        if type(seed) is not int:
            raise InvalidArgumentError(f"seed must be an int, got {seed!r}")
        self._inner = inner
        self.seed = seed
        self._rng = random.Random(seed)
        self._read_failure_rate = 0.0
        self._write_failure_rate = 0.0
        self._lost_reply_rate = 0.0
        self._delay_rate = 0.0
        self._max_delay_s = 0.0
        self.configure(
            read_failure_rate=read_failure_rate,
            write_failure_rate=write_failure_rate,
            lost_reply_rate=lost_reply_rate,
            delay_rate=delay_rate,
            max_delay_s=max_delay_s,
        )
        self._counts: dict[str, int] = dict.fromkeys(
            ("reads", "writes", "read_failures", "write_failures", "lost_replies", "delays"), 0
        )
        self._counts["pauses"] = 0
        self._scheduled_reads: list[ScheduledFault] = []
        self._scheduled_writes: list[ScheduledFault] = []
        self._pauses: list[PausedWrite] = []
        self._held: set[PausedWrite] = set()

    # --- control -----------------------------------------------------------------

    @property
    def inner(self) -> Storage:
        """The wrapped store (reach it to read or write without faults)."""
        return self._inner

    @property
    def counts(self) -> FaultCounts:
        """A snapshot of the counters."""
        return FaultCounts(**self._counts)

    def configure(
        self,
        *,
        read_failure_rate: float | None = None,
        write_failure_rate: float | None = None,
        lost_reply_rate: float | None = None,
        delay_rate: float | None = None,
        max_delay_s: float | None = None,
    ) -> None:
        """Change the random fault rates; the ones not named keep their value.

        Raises :class:`~pyweft.errors.InvalidArgumentError` (changing nothing)
        for a rate outside ``[0, 1]``, write rates summing past 1, or a bad delay.
        """
        reads = self._read_failure_rate if read_failure_rate is None else read_failure_rate
        writes = self._write_failure_rate if write_failure_rate is None else write_failure_rate
        lost = self._lost_reply_rate if lost_reply_rate is None else lost_reply_rate
        delays = self._delay_rate if delay_rate is None else delay_rate
        max_delay = self._max_delay_s if max_delay_s is None else max_delay_s
        checked = (
            _rate("read_failure_rate", reads),
            _rate("write_failure_rate", writes),
            _rate("lost_reply_rate", lost),
            _rate("delay_rate", delays),
            _seconds("max_delay_s", max_delay),
        )
        if checked[1] + checked[2] > 1:
            raise InvalidArgumentError(
                f"write_failure_rate + lost_reply_rate must not exceed 1 (a write meets at most "
                f"one of them), got {checked[1]} + {checked[2]}"
            )
        (
            self._read_failure_rate,
            self._write_failure_rate,
            self._lost_reply_rate,
            self._delay_rate,
            self._max_delay_s,
        ) = checked

    def heal(self) -> None:
        """Stop injecting faults: rates go to 0, armed faults are disarmed, held writes released.

        The counters are kept. :meth:`configure` turns random faults on again.
        """
        self.configure(
            read_failure_rate=0.0, write_failure_rate=0.0, lost_reply_rate=0.0, delay_rate=0.0
        )
        for fault in (*self._scheduled_reads, *self._scheduled_writes):
            fault.cancel()
        self._scheduled_reads.clear()
        self._scheduled_writes.clear()
        for pause in (*self._pauses, *self._held):
            pause.cancelled = True
            pause.release()
        self._pauses.clear()
        self._held.clear()

    def fail_nth_write(
        self, n: int = 1, *, match: WriteMatch | None = None, outcome_unknown: bool = False
    ) -> ScheduledFault:
        """Make the ``n``-th write from now whose ops satisfy ``match`` (any write if
        ``None``) raise: before it reaches the store, or, with ``outcome_unknown``,
        after it was applied.
        """
        fault = ScheduledFault(
            n=_positive("n", n),
            match=match,
            outcome="unknown" if outcome_unknown else "failed",
            what="write",
        )
        self._scheduled_writes.append(fault)
        return fault

    def fail_nth_read(self, n: int = 1, *, match: ReadMatch | None = None) -> ScheduledFault:
        """Make the ``n``-th read from now whose key (``get``) or prefix (``scan``,
        ``count``) satisfies ``match`` (any read if ``None``) raise."""
        fault = ScheduledFault(n=_positive("n", n), match=match, outcome="failed", what="read")
        self._scheduled_reads.append(fault)
        return fault

    def pause_next_write(self, *, match: WriteMatch | None = None) -> PausedWrite:
        """Hold the next write whose ops satisfy ``match`` (any write if ``None``).

        Returns a :class:`PausedWrite` to await and then release or fail. Only
        one write is held per call; other writes keep flowing meanwhile.
        """
        pause = PausedWrite(match)
        self._pauses.append(pause)
        return pause

    # --- the storage protocol ------------------------------------------------------

    @property
    def capabilities(self) -> StorageCapabilities:
        return self._inner.capabilities

    async def get(self, key: str) -> bytes | None:
        return await self._read("get", key, lambda: self._inner.get(key))

    async def scan(
        self,
        prefix: str,
        *,
        start: str | None = None,
        end: str | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> list[tuple[str, bytes]]:
        return await self._read(
            "scan",
            prefix,
            lambda: self._inner.scan(prefix, start=start, end=end, limit=limit, reverse=reverse),
        )

    async def batch(self, ops: Sequence[Op]) -> None:
        await self._write("batch", (), ops, lambda: self._inner.batch(ops))

    async def conditional_batch(self, conditions: Sequence[Expect], ops: Sequence[Op]) -> bool:
        return await self._write(
            "conditional_batch",
            conditions,
            ops,
            lambda: self._inner.conditional_batch(conditions, ops),
        )

    async def close(self) -> None:
        await self._inner.close()

    def __getattr__(self, name: str) -> Any:
        # Optional extensions and adapter attributes (listen/notify, path...) pass
        # through; ``count`` is a read, so it can fault like one.
        if name.startswith("_") or name in ("read_many", "take"):
            # Without read_many the engine reads one key or range at a time, and each
            # of those reads can fault on its own; without take, workers claim through
            # scan and conditional_batch, which fault like any read and write.
            raise AttributeError(name)
        attr = getattr(self._inner, name)
        if name == "count":
            counter: Callable[[str], Awaitable[int]] = attr

            async def count(prefix: str) -> int:
                return await self._read("count", prefix, lambda: counter(prefix))

            return count
        return attr

    def __repr__(self) -> str:
        return f"FaultyStorage({self._inner!r}, seed={self.seed})"

    # --- fault machinery -------------------------------------------------------------

    def _draw(self) -> tuple[float, bool, float, bool]:
        # Always the same number of draws per call, whatever the rates, so that
        # a given sequence of calls meets the same faults for a given seed.
        rng = self._rng
        roll, delay_roll, delay_amount, before = (
            rng.random(),
            rng.random(),
            rng.random(),
            rng.random(),
        )
        delayed = delay_roll < self._delay_rate and self._max_delay_s > 0
        return roll, delayed, delay_amount * self._max_delay_s, before < 0.5

    def _error(self, operation: str, n: int, *, unknown: bool, how: str) -> InjectedFaultError:
        if unknown:
            what = "was applied but its reply was lost (outcome unknown)"
        else:
            what = "failed before reaching the store"
        return InjectedFaultError(
            f"injected fault: {operation} #{n} {what} ({how}; FaultyStorage seed={self.seed})",
            operation=operation,
            outcome_unknown=unknown,
        )

    async def _delay(self, seconds: float) -> None:
        self._counts["delays"] += 1
        await asyncio.sleep(seconds)

    async def _read(self, operation: str, subject: str, call: Callable[[], Awaitable[T]]) -> T:
        self._counts["reads"] += 1
        n = self._counts["reads"]
        roll, delayed, delay_s, before = self._draw()
        scheduled = self._take(self._scheduled_reads, subject)
        if delayed and before:
            await self._delay(delay_s)
        if scheduled is not None or roll < self._read_failure_rate:
            self._counts["read_failures"] += 1
            how = "armed by fail_nth_read" if scheduled is not None else "random"
            raise self._error(operation, n, unknown=False, how=how)
        result = await call()
        if delayed and not before:
            await self._delay(delay_s)
        return result

    async def _write(
        self,
        operation: str,
        conditions: Sequence[Expect],
        ops: Sequence[Op],
        call: Callable[[], Awaitable[T]],
    ) -> T:
        self._counts["writes"] += 1
        n = self._counts["writes"]
        roll, delayed, delay_s, before = self._draw()
        outcome: Outcome | None = None
        how = "random"
        pause = self._take_pause(ops)
        if pause is not None:
            self._counts["pauses"] += 1
            self._held.add(pause)
            try:
                verdict = await pause._hold(conditions, ops)
            finally:
                self._held.discard(pause)
            if verdict != "release" and not pause.cancelled:
                outcome, how = verdict, "failed by PausedWrite.fail"
        scheduled = self._take(self._scheduled_writes, ops)
        if outcome is None and scheduled is not None:
            outcome, how = scheduled.outcome, "armed by fail_nth_write"
        if outcome is None:
            if roll < self._write_failure_rate:
                outcome = "failed"
            elif roll < self._write_failure_rate + self._lost_reply_rate:
                outcome = "unknown"
        if delayed and before:
            await self._delay(delay_s)
        if outcome == "failed":
            self._counts["write_failures"] += 1
            raise self._error(operation, n, unknown=False, how=how)
        result = await call()
        if outcome == "unknown":
            self._counts["lost_replies"] += 1
            raise self._error(operation, n, unknown=True, how=how)
        if delayed and not before:
            await self._delay(delay_s)
        return result

    @staticmethod
    def _take(armed: list[ScheduledFault], subject: Any) -> ScheduledFault | None:
        # Every armed fault counts this call, so each one's "n-th from now" holds
        # even when another fault fires on the same call.
        fired = [f for f in armed if not f.cancelled and f._hit(subject)]
        armed[:] = [f for f in armed if not f.cancelled and not f.fired]
        return fired[0] if fired else None

    def _take_pause(self, ops: Sequence[Op]) -> PausedWrite | None:
        for pause in self._pauses:
            if pause.match is None or pause.match(ops):
                self._pauses.remove(pause)
                return pause
        return None
