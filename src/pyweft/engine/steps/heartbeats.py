"""Heartbeats of one activity attempt: liveness in memory, details in the store.

``heartbeat(details)`` must be cheap enough for a tight loop (it may be called
from the attempt's worker thread), so it only records the latest details and
the time; writing is the event loop's job, at most once per throttle interval:

- the first heartbeat with details is written at once, later ones at the end
  of the interval, always the latest value (older ones are simply skipped);
- writes are single-flight and go through the run's own fenced commit path
  (:meth:`Run.commit_pending`), conditioned on the step not being recorded yet,
  so a deposed engine cannot write them and one can never outlive its step;
- the details live in the step's progress record (``wf:{id}:p:{step}``), which
  the step's outcome deletes when it is committed, the run's end deletes with
  its other open steps, and purge deletes with the run. A failed attempt
  carries them into the record of its retry (with any value not yet written),
  so the retry, in this process or after a restart, reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import threading
from typing import TYPE_CHECKING, Any

import msgspec

from pyweft.codec import payload_size_error
from pyweft.engine.replay.records import PendingStep
from pyweft.engine.replay.run import Superseded
from pyweft.errors import PayloadError, RunTornDown

if TYPE_CHECKING:
    from pyweft.engine.replay.run import Run

log = logging.getLogger("pyweft.activities")

DEFAULT_THROTTLE_S = 30.0
"""How often details are written when the activity sets no heartbeat timeout."""


def throttle_for(throttle_s: float | None, heartbeat_timeout_s: float | None) -> float:
    """The write interval: as given, else 0.8 of the heartbeat timeout, else 30s."""
    if throttle_s is not None:
        return throttle_s
    if heartbeat_timeout_s is not None:
        return min(DEFAULT_THROTTLE_S, heartbeat_timeout_s * 0.8)
    return DEFAULT_THROTTLE_S


class Heartbeats:
    """The throttled, fenced writer of one attempt's heartbeats (see module doc)."""

    __slots__ = (
        "_armed",
        "_base",
        "_closed",
        "_context",
        "_dirty",
        "_error",
        "_last_write",
        "_latest",
        "_loop",
        "_loop_thread",
        "_run",
        "_task",
        "_throttle",
        "_timer",
        "last_beat",
        "payload",
        "payload_at",
        "writes",
    )

    def __init__(self, run: Run, base: PendingStep, throttle_s: float) -> None:
        self._run = run
        self._base = base  # the step's progress record; details are written into it
        self._throttle = throttle_s
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        # Writes run in the attempt's own context, captured at the first heartbeat (a
        # def activity's thread runs in a copy of it): inside a race branch,
        # commit_pending must see the branch's bookkeeping so a losing branch's record
        # is deleted with the branch.
        self._context: contextvars.Context | None = None
        self.last_beat = run.services.clock.now()
        self._latest: Any = None
        self._dirty = False
        self._armed = False
        self._closed = False
        self._last_write = -math.inf
        self._timer: Any = None
        self._task: asyncio.Task[None] | None = None
        self._error: PayloadError | None = None
        self.payload: bytes | None = base.heartbeat  # the latest details stored (or carried)
        self.payload_at: float | None = base.heartbeat_at
        self.writes = 0

    def beat(self, details: Any) -> None:
        """Record liveness and, unless ``details`` is ``None``, the latest details.

        Callable from any thread; it never waits for the store.
        """
        if self._error is not None:
            raise self._error
        self.last_beat = self._run.services.clock.now()
        if details is None:
            return
        self._latest = details
        self._dirty = True
        if self._armed or self._closed:
            return
        self._armed = True
        if self._context is None:
            self._context = contextvars.copy_context()
        if threading.get_ident() == self._loop_thread:
            self._arm()
        else:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nothing to write to
                self._loop.call_soon_threadsafe(self._arm)

    def beat_from_outside(self, payload: bytes | None, at: float) -> None:
        """A heartbeat sent by token (``engine.heartbeat_activity``) while the step waits
        for completion: counts for the heartbeat timeout, and its details are stored."""
        details = None if payload is None else self._run.services.codec.decode(payload)
        self.beat(details)
        self.last_beat = max(self.last_beat, at)

    def rebase(self, base: PendingStep) -> None:
        """The step's progress record changed (it parked on a token): write onto it."""
        self._base = base

    def _arm(self) -> None:
        if self._closed:
            return
        clock = self._run.services.clock
        at = self._last_write + self._throttle
        if at <= clock.now():
            self._start()
        else:
            self._timer = clock.call_at(at, self._start)

    def _start(self) -> None:
        self._timer = None
        if self._closed:
            self._armed = False
            return
        self._task = self._loop.create_task(self._write(), context=self._context)

    async def _write(self) -> None:
        run = self._run
        clock = run.services.clock
        try:
            self._dirty = False
            payload = self._encode(self._latest)
            at = clock.now()
            await run.commit_pending(
                msgspec.structs.replace(self._base, heartbeat=payload, heartbeat_at=at)
            )
            self.payload, self.payload_at = payload, at
            self.writes += 1
        except PayloadError as exc:
            self._error = exc  # raised at the activity's next heartbeat()
        except RunTornDown:
            pass
        except (Exception, Superseded) as exc:
            # The run's own writes fail the same way (storage, deposition, another
            # writer): stop driving it, as any other commit of the run would.
            if run.teardown_for(exc) is None:
                log.warning("workflow %s: heartbeat details not stored: %s", run.id, exc)
        finally:
            self._task = None
            self._last_write = clock.now()
            self._armed = False
            if self._dirty and not self._closed and self._error is None:
                self._armed = True
                self._arm()

    def _encode(self, details: Any) -> bytes:
        services = self._run.services
        try:
            payload = services.codec.encode(details)
        except PayloadError as exc:
            raise PayloadError(f"heartbeat details: {exc}", path=exc.path) from exc
        if len(payload) > services.max_payload_bytes:
            raise payload_size_error(
                len(payload), services.max_payload_bytes, what="heartbeat details"
            )
        return payload

    async def close(self) -> None:
        """Stop writing (the attempt ended): wait for a write in flight, drop the timer."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = self._task
        if task is not None:
            await asyncio.wait({task})

    def carried(self) -> tuple[bytes | None, float | None]:
        """The latest details, for the record of the next attempt (the last value given is
        flushed there even if the throttle had not written it yet)."""
        if self._dirty:
            try:
                return self._encode(self._latest), self.last_beat
            except PayloadError as exc:
                log.warning("workflow %s: last heartbeat details dropped: %s", self._run.id, exc)
        return self.payload, self.payload_at
