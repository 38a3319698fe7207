"""``ownership="lease"``: one store-wide lease, with an epoch that fences every write.

Two keys, because compare-and-swap compares whole values:

* ``lease:epoch`` — 8 bytes, big-endian, in [1, 2**53 - 2]. It changes only
  when ownership moves to another holder, never on renewal, and is never
  deleted. Every engine-owned write is conditioned on it.
* ``lease:holder`` — JSON ``{"holder_id", "expires_at_ms", "epoch"}`` plus who
  holds it (``engine_id``, ``host``, ``pid``, process start time, boot id),
  rewritten by every renewal. A record that does not decode strictly is
  garbage: treated as expired and stealable, so it can never wedge the store.

Acquire reads the holder, then the epoch (so a concurrent acquire can only
look like "holder gone, epoch present"), waits while a live holder exists (logging who
holds it and until when), and takes over with one conditional batch on the
exact bytes it read. A live record left by a dead earlier incarnation of this
same engine (same ``engine_id`` and host, its process provably gone) is taken
over at once instead of after its TTL. Renewal
is single-flight and compares against the bytes this engine last wrote; a
failed renewal CAS is a deposition unless the stored record is this engine's
own at its own epoch (a renewal that committed but whose reply was lost), and
a storage error is only a warning. Release
waits for a renewal in flight, then deletes the holder (never the epoch).
"""

from __future__ import annotations

import asyncio
import json
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pyweft.clock import Clock, TimerHandle
from pyweft.engine.ownership.identity import Incarnation, incarnation_from, provably_gone
from pyweft.errors import (
    ConfigurationError,
    EngineDeposedError,
    LeaseAcquisitionTimeoutError,
    LeaseCorruptedError,
    LeaseLostWarning,
    LeaseNotHeldError,
    StorageError,
)
from pyweft.storage.base import Delete, Expect, Put, Storage

EPOCH_KEY = "lease:epoch"
HOLDER_KEY = "lease:holder"
MAX_EPOCH = 2**53 - 2
_MAX_EXPIRY_MS = 2**53 - 1

log = logging.getLogger("pyweft.lease")


def encode_epoch(epoch: int) -> bytes:
    if not 1 <= epoch <= MAX_EPOCH:
        raise LeaseCorruptedError(f"lease epoch {epoch} is outside 1..{MAX_EPOCH}")
    return epoch.to_bytes(8, "big")


def decode_epoch(raw: bytes) -> int:
    """The epoch in ``raw``; :class:`LeaseCorruptedError` unless it is exactly valid."""
    if len(raw) != 8:
        raise LeaseCorruptedError(f"lease epoch must be 8 bytes, found {len(raw)}")
    value = int.from_bytes(raw, "big")
    if not 1 <= value <= MAX_EPOCH:
        raise LeaseCorruptedError(f"lease epoch {value} is outside 1..{MAX_EPOCH}")
    return value


@dataclass(frozen=True, slots=True)
class Holder:
    holder_id: str
    expires_at_ms: int
    epoch: int
    owner: Incarnation | None = None  # None in records written before pyweft kept it


def encode_holder(holder: Holder) -> bytes:
    data: dict[str, Any] = {
        "holder_id": holder.holder_id,
        "expires_at_ms": holder.expires_at_ms,
        "epoch": holder.epoch,
    }
    if holder.owner is not None:
        data.update(holder.owner.fields())
    return json.dumps(data, separators=(",", ":")).encode()


def decode_holder(raw: bytes) -> Holder | None:
    """The holder in ``raw``, or ``None`` for garbage (which counts as expired)."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    holder_id, expires, epoch = data.get("holder_id"), data.get("expires_at_ms"), data.get("epoch")
    if not isinstance(holder_id, str) or not holder_id:
        return None
    if type(expires) is not int or not 0 <= expires <= _MAX_EXPIRY_MS:
        return None
    if type(epoch) is not int or not 1 <= epoch <= MAX_EPOCH:
        return None
    return Holder(holder_id, expires, epoch, incarnation_from(data, holder_id))


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaseHealth:
    """What ``engine.lease_health()`` reports."""

    state: Literal["no-lease", "healthy", "contested"]
    holder_id: str | None = None
    epoch: int | None = None
    expires_at: float | None = None
    held_since: float | None = None
    last_renewed_at: float | None = None


class LeaseManager:
    """Acquires, renews and releases the store lease for one engine."""

    def __init__(
        self,
        storage: Storage,
        clock: Clock,
        holder_id: str,
        *,
        ttl_s: float,
        renew_interval_s: float,
        wait_timeout_s: float,
        poll_interval_s: float = 1.0,
        on_deposed: Callable[[str], None] = lambda _: None,
    ) -> None:
        if not (ttl_s > 0 and renew_interval_s > 0 and wait_timeout_s >= 0):
            raise ConfigurationError("lease ttl, renew interval and wait timeout must be positive")
        if renew_interval_s >= ttl_s:
            raise ConfigurationError(
                f"lease_renew_interval ({renew_interval_s}s) must be shorter than lease_ttl "
                f"({ttl_s}s), or the lease expires between renewals"
            )
        self._storage = storage
        self._clock = clock
        self.holder_id = holder_id
        self._ttl = ttl_s
        self._renew_every = renew_interval_s
        self._wait_timeout = wait_timeout_s
        self._poll = poll_interval_s
        self._on_deposed = on_deposed
        self.epoch_bytes: bytes | None = None
        self._holder_bytes: bytes | None = None
        self._expires_ms = 0
        self._held_since: float | None = None
        self._last_renewed: float | None = None
        self._renewing: asyncio.Task[None] | None = None
        self._timer: TimerHandle | None = None
        self._stopped = False
        self.deposed = False
        self.identity: Incarnation | None = None  # set by the engine before acquire()

    # --- fencing (used by the Committer for every engine write) ---------------------------

    def check(self) -> None:
        if self.deposed:
            raise EngineDeposedError(
                "this engine lost the store lease to another engine and no longer writes"
            )
        if self.epoch_bytes is None:
            raise LeaseNotHeldError(
                "the engine does not hold the store lease yet; enter the engine "
                "(async with Engine(...)) and let it acquire the lease before using it"
            )

    def conditions(self, workflow_id: str | None = None) -> list[Expect]:
        self.check()
        assert self.epoch_bytes is not None
        return [Expect(key=EPOCH_KEY, value=bytes(self.epoch_bytes))]

    async def confirm(self, workflow_id: str | None = None) -> None:
        """Before a side effect (an activity): raise unless the lease is still ours.

        Valid for more than one renewal interval by this engine's clock: nothing to do
        (a taker waits for expiry, so clocks may disagree by up to that interval).
        Otherwise the lease is renewed now: a renewal that finds it taken deposes
        this engine (:class:`EngineDeposedError`); one the store does not answer
        raises :class:`StorageError` (the run is stopped and driven again later).
        """
        self.check()
        if self._expires_ms / 1000 - self._clock.now() > self._renew_every:
            return
        if self._renewing is None or self._renewing.done():
            self._renewing = asyncio.get_running_loop().create_task(self.renew())
        await asyncio.shield(self._renewing)
        self.check()
        if self._expires_ms / 1000 - self._clock.now() <= self._renew_every:
            raise StorageError(
                "could not confirm the store lease before starting a step (the store did "
                "not answer its renewal); the run waits until it does"
            )

    async def disambiguate(self, workflow_id: str | None = None) -> None:
        """A fenced write failed: was it an ordinary lost race, or were we deposed?"""
        try:
            current = await self._storage.get(EPOCH_KEY)
        except Exception:
            current = None  # cannot prove we still hold it: fail closed
        if current != self.epoch_bytes:
            self.depose("a fenced write found a newer lease epoch")
            raise EngineDeposedError(
                "another engine took over the store lease; this write was rejected"
            )

    def depose(self, reason: str) -> None:
        if self.deposed:
            return
        self.deposed = True
        self._stop_timer()
        message = f"pyweft engine {self.holder_id} lost the store lease ({reason}); stopping"
        log.warning(message)
        warnings.warn(message, LeaseLostWarning, stacklevel=2)
        self._on_deposed(reason)

    # --- acquire -----------------------------------------------------------------------

    async def acquire(self) -> None:
        """Take the lease, waiting while another engine holds a live one."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self._wait_timeout
        last_holder: str | None = None
        while True:
            holder_raw = await self._storage.get(HOLDER_KEY)  # holder first, then epoch
            epoch_raw = await self._storage.get(EPOCH_KEY)
            holder = decode_holder(holder_raw) if holder_raw is not None else None
            if epoch_raw is None and holder_raw is not None:
                raise LeaseCorruptedError(
                    "the store has a lease holder record but no lease epoch; it was damaged "
                    "outside pyweft. Stop every engine, then delete the key lease:holder"
                )
            current = decode_epoch(epoch_raw) if epoch_raw is not None else 0
            now_ms = int(self._clock.now() * 1000)
            if (
                holder is not None
                and holder.holder_id != self.holder_id
                and now_ms < holder.expires_at_ms
                and not self._predecessor(holder)
            ):
                if holder.holder_id != last_holder:
                    log.info(
                        "waiting for the store lease: held by %s until %s (in %.1fs)",
                        _who(holder),
                        _when(holder.expires_at_ms),
                        (holder.expires_at_ms - now_ms) / 1000,
                    )
                last_holder = holder.holder_id
            else:
                if holder is not None and now_ms < holder.expires_at_ms:
                    log.warning(
                        "taking the store lease back from %s at once: it is an earlier "
                        "incarnation of this engine and its process is gone",
                        _who(holder),
                    )
                if current + 1 > MAX_EPOCH:
                    raise LeaseCorruptedError("the lease epoch reached its ceiling; cannot acquire")
                if await self._take(current + 1, holder_raw, epoch_raw):
                    return
            if self._stopped:
                return
            if loop.time() >= deadline:
                raise LeaseAcquisitionTimeoutError(
                    f"waited {loop.time() - started:.1f}s for the store lease held by "
                    f"{last_holder!r}; raise lease_wait_timeout above the other engine's "
                    "drain time and lease_ttl, or stop it",
                    waited_s=loop.time() - started,
                    held_by=last_holder,
                )
            await asyncio.sleep(min(self._poll, max(0.0, deadline - loop.time())))

    def _predecessor(self, holder: Holder) -> bool:
        return self.identity is not None and provably_gone(holder.owner, self.identity)

    async def _take(self, epoch: int, holder_raw: bytes | None, epoch_raw: bytes | None) -> bool:
        now = self._clock.now()
        new_epoch = encode_epoch(epoch)
        holder = Holder(self.holder_id, int((now + self._ttl) * 1000), epoch, self.identity)
        holder_bytes = encode_holder(holder)
        ok = await self._storage.conditional_batch(
            [Expect(key=HOLDER_KEY, value=holder_raw), Expect(key=EPOCH_KEY, value=epoch_raw)],
            [Put(key=EPOCH_KEY, value=new_epoch), Put(key=HOLDER_KEY, value=holder_bytes)],
        )
        if ok:
            self.epoch_bytes, self._holder_bytes = new_epoch, holder_bytes
            self._expires_ms = holder.expires_at_ms
            self._held_since = self._last_renewed = now
            self._arm()
        return ok

    # --- renew -------------------------------------------------------------------------

    def _arm(self) -> None:
        if self._stopped or self.deposed:
            return
        self._timer = self._clock.call_at(self._clock.now() + self._renew_every, self._due)

    def _due(self) -> None:
        self._timer = None
        if self._stopped or self.deposed:
            return
        if self._renewing is None or self._renewing.done():  # single flight
            self._renewing = asyncio.get_running_loop().create_task(self.renew())
        self._arm()

    async def renew(self) -> None:
        """Extend the lease; a lost CAS means another engine took it over."""
        if self._holder_bytes is None or self.deposed:
            return
        epoch = decode_epoch(self.epoch_bytes or b"")
        now = self._clock.now()
        holder = Holder(self.holder_id, int((now + self._ttl) * 1000), epoch, self.identity)
        new_bytes = encode_holder(holder)
        for attempt in range(2):
            try:
                ok = await self._storage.conditional_batch(
                    [Expect(key=HOLDER_KEY, value=self._holder_bytes)],
                    [Put(key=HOLDER_KEY, value=new_bytes)],
                )
            except Exception as exc:
                if now * 1000 >= self._expires_ms:
                    log.warning("lease renewal-unconfirmable: %s (the lease may have expired)", exc)
                return
            if ok:
                self._holder_bytes, self._expires_ms, self._last_renewed = (
                    new_bytes,
                    holder.expires_at_ms,
                    now,
                )
                return
            if attempt == 0 and await self._own_record_stored():
                continue  # an earlier renewal landed though its reply was lost: retry on it
            break
        self.depose("deposed: the holder record changed under a renewal")

    async def _own_record_stored(self) -> bool:
        """Is the stored holder this engine's own record at its own epoch? (A renewal
        whose commit landed but whose reply was lost leaves exactly that.) If so, adopt
        the stored bytes as the ones the next compare-and-swap expects."""
        try:
            raw = await self._storage.get(HOLDER_KEY)
            epoch_raw = await self._storage.get(EPOCH_KEY)
        except Exception:
            return False
        stored = decode_holder(raw) if raw is not None else None
        if (
            stored is None
            or raw is None
            or stored.holder_id != self.holder_id
            or epoch_raw != self.epoch_bytes
            or encode_epoch(stored.epoch) != self.epoch_bytes
        ):
            return False
        self._holder_bytes, self._expires_ms = raw, stored.expires_at_ms
        return True

    # --- release -----------------------------------------------------------------------

    async def release(self) -> bool:
        """Give the lease up (after any renewal in flight). Returns whether the delete landed."""
        self._stopped = True
        self._stop_timer()
        if self._renewing is not None:
            await asyncio.gather(self._renewing, return_exceptions=True)
        if self._holder_bytes is None or self.deposed:
            return False
        try:
            ok = await self._storage.conditional_batch(
                [Expect(key=HOLDER_KEY, value=self._holder_bytes)], [Delete(key=HOLDER_KEY)]
            )
        except Exception:
            log.warning("could not release the lease; it expires after its ttl", exc_info=True)
            return False
        if ok:
            self._holder_bytes = None
        return ok

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def health(self) -> LeaseHealth:
        if self.epoch_bytes is None:
            return LeaseHealth(state="no-lease")
        expired = self._clock.now() * 1000 >= self._expires_ms
        return LeaseHealth(
            state="contested" if self.deposed or expired else "healthy",
            holder_id=self.holder_id,
            epoch=decode_epoch(self.epoch_bytes),
            expires_at=self._expires_ms / 1000,
            held_since=self._held_since,
            last_renewed_at=self._last_renewed,
        )


def _who(holder: Holder) -> str:
    if holder.owner is None:
        return f"engine {holder.holder_id}"
    return f"{holder.owner.describe()} [{holder.holder_id}]"


def _when(expires_at_ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(expires_at_ms / 1000, UTC).isoformat(timespec="seconds")


async def read_lease(storage: Storage, now: float) -> dict[str, Any]:
    """What the store says about the lease, for ``pyweft doctor``."""
    holder_raw = await storage.get(HOLDER_KEY)
    epoch_raw = await storage.get(EPOCH_KEY)
    holder = decode_holder(holder_raw) if holder_raw is not None else None
    epoch: int | str | None
    try:
        epoch = decode_epoch(epoch_raw) if epoch_raw is not None else None
    except LeaseCorruptedError as exc:
        epoch = f"corrupt: {exc}"
    return {
        "epoch": epoch,
        "holder": holder.holder_id if holder else ("garbage" if holder_raw else None),
        "expires_at": holder.expires_at_ms / 1000 if holder else None,
        "live": bool(holder and now * 1000 < holder.expires_at_ms),
    }
