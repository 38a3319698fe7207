"""``TestEnv``: the real engine on a memory store (or a temporary SQLite file) and a
virtual clock, with time skipping, activity mocks and restarts.

Nothing is faked but time and the activities you mock: runs are stored, replayed
and recovered exactly as in production.

Time moves only when the test says so: ``await env.advance("2 days")`` fires every
durable timer in the window (sleeps, timeouts, retry backoff, delayed starts,
review escalations, schedules) in due order, letting the engine react to each
before the next. With ``auto_advance=True``, time also skips ahead on its own
while the test waits in :meth:`TestEnv.result` or :meth:`TestEnv.wait_for` and
every run is parked (see docs/decisions/0022-test-kit-time-skipping.md).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from pyweft.clock import VirtualClock
from pyweft.durations import DurationLike, parse_duration, parse_timestamp
from pyweft.engine.engine import Engine
from pyweft.engine.handle import WorkflowHandle
from pyweft.engine.replay.info import WorkflowInfo
from pyweft.errors import InvalidArgumentError, PyweftError
from pyweft.storage.base import Storage
from pyweft.storage.memory import MemoryStorage
from pyweft.testing.mocks import _NOTHING, MockActivity, MockRegistry

DEFAULT_START = datetime(2030, 1, 1, tzinfo=UTC).timestamp()


class TestEnv:
    """A test environment: ``async with TestEnv(workflows=[...]) as env:``.

    ``storage``: ``"memory"`` (default), ``"sqlite"`` (a temporary file, removed at
    the end), a URL or a :class:`~pyweft.storage.Storage`. ``start``: the virtual
    time to begin at (a ``datetime`` or epoch seconds; default 2030-01-01 UTC).
    ``settle_timeout``: real seconds to wait for runs to settle between timers
    before :meth:`advance` gives up. Other keyword arguments go to the
    :class:`~pyweft.Engine`.
    """

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(
        self,
        workflows: Iterable[Callable[..., Any]] = (),
        activities: Iterable[Callable[..., Any]] = (),
        *,
        storage: str | Storage = "memory",
        start: datetime | float = DEFAULT_START,
        auto_advance: bool = False,
        settle_timeout: float = 10.0,
        **engine_options: Any,
    ) -> None:
        if "clock" in engine_options:
            raise InvalidArgumentError("TestEnv brings its own virtual clock; drop clock=")
        self.workflows = list(workflows)
        self.activities = list(activities)
        self.clock = VirtualClock(parse_timestamp(start, field="start"))
        self.auto_advance = auto_advance
        self.settle_timeout = settle_timeout
        self._options = engine_options
        self._tmp: str | None = None
        self._owned: Storage | None = None
        self._storage: str | Storage = self._pick_storage(storage)
        self._engine: Engine | None = None
        self.mocks = MockRegistry(lambda: self.clock)

    def _pick_storage(self, storage: str | Storage) -> str | Storage:
        if storage == "memory":
            self._owned = MemoryStorage()
            return self._owned
        if storage == "sqlite":
            self._tmp = tempfile.mkdtemp(prefix="pyweft-test-")
            return f"sqlite:///{self._tmp}/test.db"
        return storage

    # --- lifecycle --------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise PyweftError("the TestEnv is not open; use `async with TestEnv(...) as env`")
        return self._engine

    async def __aenter__(self) -> TestEnv:
        await self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _open(self) -> Engine:
        engine = Engine(
            self._storage,
            workflows=self.workflows,
            activities=self.activities,
            clock=self.clock,
            **self._options,
        )
        await engine.open()
        self._engine = engine
        await self.settle()
        return engine

    async def restart(self) -> Engine:
        """Stop the engine (as a deploy or a crash-free restart would) and open a new one
        over the same store, at the current virtual time. Mocks stay in place."""
        if self._engine is not None:
            await self._engine.shutdown()
            self._engine = None
        return await self._open()

    async def close(self) -> None:
        self.mocks.restore_all()
        try:
            if self._engine is not None:
                await self._engine.shutdown()
                self._engine = None
            if self._owned is not None:
                await self._owned.close()
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)

    # --- time -------------------------------------------------------------------------

    def now(self) -> datetime:
        """The virtual time."""
        return datetime.fromtimestamp(self.clock.now(), tz=UTC)

    async def advance(self, duration: DurationLike) -> None:
        """Move virtual time forward by ``duration``, firing every timer in the window in
        due order and letting the engine react to each (so a timer armed in reaction to
        another also fires, if it falls inside the window)."""
        await self.advance_to(self.clock.now() + parse_duration(duration, field="advance"))

    async def advance_to(self, when: datetime | float) -> None:
        target = parse_timestamp(when, field="advance_to")
        if target < self.clock.now():
            raise InvalidArgumentError("advance_to cannot move the clock backwards")
        await self.settle(strict=True)
        while True:
            nxt = self.clock.next_deadline()
            if nxt is None or nxt > target:
                break
            self.clock.advance_to(nxt)
            await self.settle(strict=True)
        self.clock.advance_to(target)
        await self.settle(strict=True)

    async def settle(self, *, strict: bool = False) -> bool:
        """Let the engine work until it is quiescent (every run parked, nothing firing).

        Returns whether it got there within ``settle_timeout``; with ``strict``, raises
        :class:`TimeoutError` naming the runs still busy instead.
        """
        engine = self.engine
        deadline = time.monotonic() + self.settle_timeout
        calm = spins = 0
        while calm < 3:
            for _ in range(8):
                await asyncio.sleep(0)
            await engine.schedules.firing.idle()
            if engine.quiescent():
                calm += 1
                continue
            calm = 0
            spins += 1
            if spins > 20:
                await asyncio.sleep(0.0005)  # let threads (sync activities, SQLite) move
            if time.monotonic() > deadline:
                if strict:
                    raise TimeoutError(
                        f"runs still busy after {self.settle_timeout:g}s of real time (an "
                        "activity that waits for something outside the test?); raise "
                        "TestEnv(settle_timeout=...) or mock the activity"
                    )
                return False
        return True

    async def _skip_until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            await self.settle()
            if done():
                return
            nxt = self.clock.next_deadline()
            if self.auto_advance and nxt is not None and self.engine.quiescent():
                self.clock.advance_to(max(nxt, self.clock.now()))
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not happen within {timeout:g}s of real time")
            await asyncio.sleep(0.001)

    # --- runs -------------------------------------------------------------------------

    async def start(self, wf: Callable[..., Any] | str, *args: Any, **options: Any) -> Any:
        """``engine.start`` (same arguments), then let the new run reach its first wait."""
        handle = await self.engine.start(wf, *args, **options)
        await self.settle()
        return handle

    async def result(self, run: WorkflowHandle[Any] | str, *, timeout: float = 30.0) -> Any:
        """The run's result (or its error), skipping virtual time meanwhile when
        ``auto_advance`` is on. ``timeout`` is in real seconds."""
        workflow_id = run if isinstance(run, str) else run.id
        task = asyncio.ensure_future(self.engine.result(workflow_id))
        try:
            await self._skip_until(task.done, timeout, f"the end of run {workflow_id!r}")
        except BaseException:
            task.cancel()
            raise
        return task.result()

    async def wait_for(
        self,
        run: WorkflowHandle[Any] | str,
        *,
        status: str | Sequence[str] | None = None,
        step: int | None = None,
        timeout: float = 10.0,
    ) -> WorkflowInfo:
        """Wait until the run has ``status`` (one or several) and/or at least ``step``
        committed steps; returns its ``describe()``. Skips virtual time meanwhile when
        ``auto_advance`` is on. ``timeout`` is in real seconds."""
        if status is None and step is None:
            raise InvalidArgumentError("wait_for needs status= and/or step=")
        wanted = (status,) if isinstance(status, str) else tuple(status or ())
        workflow_id = run if isinstance(run, str) else run.id
        seen: list[WorkflowInfo] = []

        async def check() -> bool:
            info = await self.engine.describe(workflow_id)
            seen[:] = [info]
            ok_status = not wanted or info.status in wanted
            ok_step = step is None or (info.step_count or 0) >= step
            return ok_status and ok_step

        flag = [False]

        def done() -> bool:
            return flag[0]

        async def poll() -> None:
            while not flag[0]:
                flag[0] = await check()
                if not flag[0]:
                    await asyncio.sleep(0.001)

        poller = asyncio.ensure_future(poll())
        try:
            await self._skip_until(done, timeout, f"run {workflow_id!r} reaching {wanted or ''}"
                                   f"{'' if step is None else f' step {step}'}")  # fmt: skip
        except TimeoutError as exc:
            last = seen[0] if seen else None
            raise TimeoutError(
                f"{exc}; last seen: status {last.status if last else '?'}, "
                f"{last.step_count if last else '?'} step(s)"
            ) from None
        finally:
            poller.cancel()
        return seen[0]

    # --- mocks ------------------------------------------------------------------------

    def mock(
        self,
        activity: Callable[..., Any],
        *,
        returns: Any = _NOTHING,
        raises: BaseException | None = None,
        side_effect: Callable[..., Any] | Callable[..., Awaitable[Any]] | None = None,
    ) -> MockActivity:
        """Replace what ``activity`` does until the environment closes (or ``restore()``)."""
        return self.mocks.mock(activity, returns=returns, raises=raises, side_effect=side_effect)
