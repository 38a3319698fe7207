"""An optional smoke alarm: warn when another engine is running on the same store.

Each engine writes a heartbeat ``liveness:{instance}`` with a sequence number
it increments every tick, and reads everyone else's. A peer whose sequence
advanced across two consecutive ticks of ours is live: we warn once per
incident (a peer that goes away and later comes back is a new incident), as
one :class:`SecondInstanceWarning` through :mod:`warnings` and nothing else,
so that a log set up with ``logging.captureWarnings(True)`` shows it once. No
clocks are compared across hosts, so skewed or frozen clocks cannot fool it,
and a short overlap during a clean redeploy stays quiet. A record counts only
if it sits under the key its own instance id names (no spoofing). The
detector never blocks, fences or claims anything.
"""

from __future__ import annotations

import asyncio
import json
import logging
import warnings
from contextlib import suppress

from pyweft.clock import Clock, TimerHandle
from pyweft.errors import SecondInstanceWarning
from pyweft.storage.base import Delete, Put, Storage

PREFIX = "liveness:"
ADVANCES_TO_WARN = 2

log = logging.getLogger("pyweft.detector")


class SecondInstanceDetector:
    def __init__(
        self, storage: Storage, clock: Clock, instance_id: str, *, interval_s: float = 15.0
    ) -> None:
        self._storage = storage
        self._clock = clock
        self.instance_id = instance_id
        self._interval = interval_s
        self._sequence = 0
        self._last: dict[str, int] = {}
        self._streak: dict[str, int] = {}
        self.warned: set[str] = set()
        self._timer: TimerHandle | None = None
        self._ticking: asyncio.Task[None] | None = None
        self._first = True
        self._stopped = False

    @property
    def key(self) -> str:
        return PREFIX + self.instance_id

    def start(self) -> None:
        self._due()

    def _arm(self) -> None:
        if not self._stopped:
            self._timer = self._clock.call_at(self._clock.now() + self._interval, self._due)

    def _due(self) -> None:
        if self._stopped:
            return
        if self._ticking is None or self._ticking.done():  # overlapping ticks are dropped
            self._ticking = asyncio.get_running_loop().create_task(self.tick())
        self._arm()

    async def tick(self) -> None:
        try:
            await self._tick()
        except Exception:
            log.debug("second-instance detector tick failed", exc_info=True)

    async def _tick(self) -> None:
        self._sequence += 1
        now = self._clock.now()
        record = {"instance_id": self.instance_id, "heartbeat_at": now, "sequence": self._sequence}
        rows = await self._storage.scan(PREFIX)
        if self._stopped:
            return  # never revive a heartbeat after stop()
        await self._storage.batch([Put(key=self.key, value=json.dumps(record).encode())])
        seen: set[str] = set()
        stale: list[str] = []
        for key, raw in rows:
            peer = _decode(raw)
            if peer is None or key != PREFIX + peer[0] or peer[0] == self.instance_id:
                continue
            instance, heartbeat_at, sequence = peer
            if self._first and now - heartbeat_at > 30 * self._interval:
                stale.append(key)
                continue
            seen.add(instance)
            previous = self._last.get(instance)
            if previous is not None and sequence > previous:
                self._streak[instance] = self._streak.get(instance, 0) + 1
            else:
                self._streak[instance] = 0
            self._last[instance] = sequence
            if self._streak[instance] >= ADVANCES_TO_WARN and instance not in self.warned:
                self.warned.add(instance)
                message = (
                    f"another pyweft engine ({instance}) is writing heartbeats to this store "
                    f"while this one ({self.instance_id}) runs; with ownership='none' both may "
                    "execute the same steps. Run one engine per store or use ownership='lease'"
                )
                warnings.warn(message, SecondInstanceWarning, stacklevel=2)
        for gone in set(self._last) - seen:
            self._last.pop(gone, None)
            self._streak.pop(gone, None)
            self.warned.discard(gone)  # if it comes back, that is a new incident
        if stale:
            await self._storage.batch([Delete(key=k) for k in stale])
        self._first = False

    async def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        if self._ticking is not None:
            await asyncio.gather(self._ticking, return_exceptions=True)
        with suppress(Exception):
            await self._storage.batch([Delete(key=self.key)])


def _decode(raw: bytes) -> tuple[str, float, int] | None:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    instance, at, seq = data.get("instance_id"), data.get("heartbeat_at"), data.get("sequence")
    if not isinstance(instance, str) or not isinstance(at, int | float) or at != at:
        return None
    if type(seq) is not int or seq < 0:
        return None
    return instance, float(at), seq
