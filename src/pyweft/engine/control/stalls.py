"""Event-loop stalls: name the activity that blocked the loop, and stop a run that keeps
doing it.

An ``async`` activity that calls blocking code (``time.sleep``, a synchronous HTTP
client, a long computation) freezes the whole engine: no timer fires, no claim or
lease is renewed. Past the claim TTL every run of that engine may be taken over; the
culprit is then replayed elsewhere, blocks that engine in turn, and the run bounces
between engines for ever, taking every other run of each engine it visits with it.

:class:`StallMonitor` watches the loop from a small thread. The loop beats every
``tick_s``; when no beat came for ``threshold_s`` the thread looks at what the loop
thread is executing and remembers the activity frame it finds (and the run, from
the task driving it). When the loop runs again, the stall is logged at WARNING
with its length and that activity, as asyncio's debug mode does for slow callbacks.

A stall long enough to put the engine's claims (or its store lease) at risk, one of
at least ``ttl - 2 x renew_interval``, counts a strike against the run whose activity
caused it, in a ``stall:{id}`` record of the store (so strikes add up across engines,
wherever the run bounces). At ``MAX_STRIKES`` the run is failed with
``EventLoopStall``, an error that names the activity and says how to fix it,
instead of bouncing again; under ``workflow-lease`` the same write takes the run from
whichever engine owns it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING

from pyweft.engine.control import lifecycle
from pyweft.engine.replay import keys
from pyweft.engine.replay.records import ErrorInfo
from pyweft.storage.base import Expect, Put

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore

log = logging.getLogger("pyweft.stalls")

MAX_STRIKES = 3
STALL_PREFIX = "stall:"
_TASK_PREFIX = "pyweft-run:"


def stall_key(workflow_id: str) -> str:
    return STALL_PREFIX + keys.enc(workflow_id)


@dataclass(frozen=True, slots=True)
class Stall:
    """One stall of the event loop, and what was running when it was seen."""

    seconds: float
    activity: str | None = None
    workflow_id: str | None = None
    step: int | None = None
    driver: object = field(default=None, compare=False, repr=False)  # the run's services

    def describe(self) -> str:
        if self.activity is None:
            return f"the event loop was blocked for {self.seconds:.2f}s (no activity was running)"
        where = f" (workflow {self.workflow_id}, step {self.step})" if self.workflow_id else ""
        return (
            f"the event loop was blocked for {self.seconds:.2f}s by activity "
            f"{self.activity!r}{where}: an async activity must not block; make it a plain "
            "def activity (run in a thread) or await asyncio.to_thread(...) for the blocking "
            "call"
        )


class StallMonitor:
    """Detects event-loop stalls of one engine (see the module docstring)."""

    def __init__(
        self,
        core: EngineCore,
        *,
        threshold_s: float,
        at_risk_s: float | None,
        on_stall: Callable[[Stall], None] | None = None,
    ) -> None:
        self._core = core
        self.threshold = threshold_s
        self.at_risk = at_risk_s  # stalls this long count a strike (None: never)
        self._tick = min(0.25, threshold_s / 4)
        self._on_stall = on_stall
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._beat = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._seen: Stall | None = None  # what the watcher saw during the current stall
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.stalls: list[Stall] = []

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._beat = time.monotonic()
        self._timer = self._loop.call_later(self._tick, self._on_beat)
        self._thread = threading.Thread(target=self._watch, name="pyweft-stalls", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        for task in list(self._tasks):
            await asyncio.gather(task, return_exceptions=True)

    # --- in the loop ------------------------------------------------------------------

    def _on_beat(self) -> None:
        now = time.monotonic()
        late = now - self._beat - self._tick
        self._beat = now
        if late >= self.threshold:
            seen, self._seen = self._seen, None
            stall = Stall(
                late,
                *(seen.activity, seen.workflow_id, seen.step, seen.driver) if seen else (),
            )
            self._report(stall)
        else:
            self._seen = None
        if not self._stop.is_set() and self._loop is not None:
            self._timer = self._loop.call_later(self._tick, self._on_beat)

    def _report(self, stall: Stall) -> None:
        if stall.driver is not None and stall.driver is not self._core.services:
            return  # another engine on this event loop drives that run: it reports it
        self.stalls.append(stall)
        log.warning("%s", stall.describe())
        if self._on_stall is not None:
            self._on_stall(stall)
        if (
            stall.workflow_id is not None
            and self.at_risk is not None
            and stall.seconds >= self.at_risk
            and self._core.state == "open"
        ):
            task = asyncio.get_running_loop().create_task(self._strike(stall))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _strike(self, stall: Stall) -> None:
        """Count a strike against the run; fail it at ``MAX_STRIKES``."""
        assert stall.workflow_id is not None
        workflow_id = stall.workflow_id
        storage = self._core.storage
        try:
            for _ in range(5):
                raw = await storage.get(stall_key(workflow_id))
                try:
                    count = int(json.loads(raw)["count"]) if raw is not None else 0
                except (ValueError, KeyError, TypeError):
                    count = 0
                record = {
                    "count": count + 1,
                    "activity": stall.activity,
                    "step": stall.step,
                    "seconds": round(stall.seconds, 3),
                    "at": self._core.clock.now(),
                }
                # A diagnostic counter, not run state: written outside the ownership fence
                # so that an engine that lost its lease by stalling still counts it.
                if await storage.conditional_batch(
                    [Expect(key=stall_key(workflow_id), value=raw)],
                    [Put(key=stall_key(workflow_id), value=json.dumps(record).encode())],
                ):
                    break
            else:
                return
            if count + 1 >= MAX_STRIKES:
                await self._fail(stall, count + 1)
        except Exception:
            log.exception("could not record the stall caused by workflow %s", workflow_id)

    async def _fail(self, stall: Stall, strikes: int) -> None:
        core = self._core
        assert stall.workflow_id is not None
        message = (
            f"activity {stall.activity!r} (step {stall.step}) blocked the event loop of its "
            f"engine {strikes} times (last for {stall.seconds:.1f}s), long enough for the "
            "engine to lose its claims, so the run kept moving between engines without "
            "finishing. An async activity must not block: make it a plain def activity or "
            "await asyncio.to_thread(...) for the blocking call, then fork the run from "
            "before this step (engine.fork)"
        )
        new, _ = await lifecycle.transition(
            core.storage,
            core.committer,
            stall.workflow_id,
            frozenset({"running"}),
            core.clock.now(),
            wake=True,
            rotate_claim=core.claims is not None,  # takes it from its owner, wherever it is
            status="failed",
            error=ErrorInfo(type="EventLoopStall", message=message, code="EventLoopStall"),
        )
        if new is None:
            return
        log.error("workflow %s failed: %s", stall.workflow_id, message)
        run = core.runs.get(stall.workflow_id)
        if run is not None:
            run.tear_down("it was failed for stalling the event loop")
        core.emit("failed", new)

    # --- in the watcher thread --------------------------------------------------------

    def _watch(self) -> None:
        while not self._stop.wait(self._tick):
            if self._seen is None and time.monotonic() - self._beat >= self.threshold:
                frame = sys._current_frames().get(self._loop_thread)
                if frame is not None:
                    self._seen = self._identify(frame)

    def _identify(self, frame: FrameType) -> Stall:
        """The activity (and its run and step) on the loop thread's stack, if any."""
        from pyweft.engine.steps.activities import run_activity
        from pyweft.engine.steps.attempt import run_attempt

        execute_code = run_attempt.__code__
        step_code = getattr(run_activity, "__wrapped__", run_activity).__code__
        activity: str | None = None
        workflow_id: str | None = None
        driver: object = None
        step: object = None
        f: FrameType | None = frame
        try:
            while f is not None:
                if f.f_code is execute_code:
                    act, run = f.f_locals.get("act"), f.f_locals.get("run")
                    activity = getattr(act, "name", None)
                    workflow_id = getattr(run, "id", None)
                    driver = getattr(run, "services", None)
                elif f.f_code is step_code:
                    step = f.f_locals.get("step")
                    break
                f = f.f_back
            if activity is None:  # an activity with a timeout runs in a task of its own
                codes = {
                    d.fn.__code__: name
                    for name, d in list(self._core.activities.items())
                    if hasattr(d.fn, "__code__")
                }
                f = frame
                while f is not None and activity is None:
                    activity = codes.get(f.f_code)
                    f = f.f_back
        except Exception:  # the stack moved on under us: report what was found
            pass
        return Stall(0.0, activity, workflow_id, step if isinstance(step, int) else None, driver)
