"""``ownership="workflow-lease"``: one fenced claim per run, so many engines share a store.

Per run, two keys (as for the store lease, and for the same reason):

* ``own:e:{id}`` — the run's 8-byte epoch. Minted as ``read + 1`` whenever the
  claim moves to another engine, or when another engine suspends, cancels or
  purges the run; never deleted, so a reused id can never resurrect an old
  epoch.
* ``own:h:{id}`` — JSON ``{instance, engine_id, host, pid, epoch, expires_at_ms,
  claimed_at, ...}``, rewritten by renewals, deleted when the owner finishes or
  suspends the run. ``instance`` names the owning engine in its process;
  ``engine_id`` (stable across restarts), ``host``, ``pid`` and the process's
  start time let a restarted engine prove that an earlier incarnation of itself
  is gone and take its claims back at once rather than after their TTL.

A claim is taken in the same batch that makes a run runnable (start, child
start, delayed start, resume, takeover), conditioned on the exact holder and
epoch bytes just read. Every write the owner makes for the run carries
``own:e == held epoch``; a failed write re-reads the epoch, and a changed one
means the run was taken away: this engine stops driving it (the engine itself
goes on). Claims are renewed every ``claim_renew_interval``, whether the run is
busy or parked; a holder whose expiry plus one renewal interval has passed
may be taken over by any engine's reclaim scan.

Expiry is also checked by the owner itself, by its own clock: before it dispatches
an activity (:meth:`ClaimRegistry.confirm`) a claim must be valid for at least one
more renewal interval (the safety margin), else the engine renews it on the spot
and treats a claim it cannot renew as lost; and a write whose claim has expired is
not sent unless the claim is renewed first (:meth:`ClaimRegistry.before_write`).
Takers wait one interval past expiry, owners stop one interval before it: clocks
may disagree by up to two renewal intervals (:func:`skew_tolerance`) without a deposed engine
starting a step its successor may already run.

Renewal passes and reclaim scans are batched: a pass renews up to
``RENEW_BATCH`` claims per conditional batch (one statement on PostgreSQL),
and a scan takes stale claims with concurrent conditional batches, which the
store groups into one statement per group.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from pyweft.clock import Clock
from pyweft.engine.ownership.identity import Incarnation, incarnation_from, provably_gone
from pyweft.engine.ownership.lease import decode_epoch, encode_epoch
from pyweft.engine.replay import keys
from pyweft.errors import (
    ConfigurationError,
    EngineDeposedError,
    LeaseCorruptedError,
    StorageError,
)
from pyweft.storage.base import Delete, Expect, Op, Put, Storage

# A holder is stale once expires_at + one renewal interval has passed. With the reclaim
# scan also running every renewal interval, a dead owner's runs move within
# claim_ttl + 2 x claim_renew_interval of its last renewal.
GRACE_RENEWALS = 1
# Owners stop dispatching steps this many renewal intervals before their claim expires.
MARGIN_RENEWALS = 1
# Claims renewed by one conditional batch (one statement on PostgreSQL, taking one key lock
# per claim: PostgreSQL's shared lock table holds ~6,400 by default).
RENEW_BATCH = 500
_RENEW_CONCURRENCY = 256  # per-claim renewals in flight when a batch must be retried alone
_RELEASE_BATCH = 256  # claims released at once (shutdown)

log = logging.getLogger("pyweft.claims")


def skew_tolerance(renew_interval_s: float) -> float:
    """How far engines' clocks may disagree without a deposed owner starting a step its
    successor may run too: the takers' grace plus the owners' margin."""
    return (GRACE_RENEWALS + MARGIN_RENEWALS) * renew_interval_s


def epoch_key(workflow_id: str) -> str:
    return "own:e:" + keys.enc(workflow_id)


def holder_key(workflow_id: str) -> str:
    return "own:h:" + keys.enc(workflow_id)


@dataclass(slots=True)
class Claim:
    workflow_id: str
    epoch_bytes: bytes
    holder_bytes: bytes
    claimed_at: float
    expires_ms: int


ClaimPlan = tuple[list[Op], list[Expect], Claim]
"""What takes a claim: the writes, their conditions, and the claim once committed."""


@dataclass(frozen=True, slots=True)
class HolderRecord:
    engine_id: str  # the owning engine's instance id (unique per process)
    epoch: int
    expires_at_ms: int
    claimed_at: float
    owner: Incarnation | None = None  # None in records written before pyweft kept it


def decode_holder(raw: bytes) -> HolderRecord | None:
    try:
        data = json.loads(raw)
        # Records written before the stable engine id carried the instance id in
        # ``engine_id``; newer ones carry it in ``instance``.
        instance = str(data.get("instance") or data["engine_id"])
        record = HolderRecord(
            instance,
            int(data["epoch"]),
            int(data["expires_at_ms"]),
            float(data["claimed_at"]),
            incarnation_from(data, instance) if "instance" in data else None,
        )
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, AttributeError):
        return None
    return record if record.engine_id and record.epoch >= 1 else None


class ClaimRegistry:
    """This engine's claims: the fence for its writes, plus acquire, renew and release."""

    def __init__(
        self,
        storage: Storage,
        clock: Clock,
        engine_id: str,
        *,
        ttl_s: float,
        renew_interval_s: float,
        on_lost: Callable[[str], None],
    ) -> None:
        if renew_interval_s <= 0 or ttl_s < 3 * renew_interval_s:
            raise ConfigurationError(
                f"claim_ttl ({ttl_s}s) must be at least 3 x claim_renew_interval "
                f"({renew_interval_s}s), so a healthy owner renews well before expiry"
            )
        self._storage = storage
        self._clock = clock
        self.engine_id = engine_id
        self.ttl = ttl_s
        self.renew_interval = renew_interval_s
        self._on_lost = on_lost
        self.claims: dict[str, Claim] = {}
        self._renewing: asyncio.Task[None] | None = None
        self.identity: Incarnation | None = None  # set by the engine when it opens
        self._waiting_on: set[str] = set()  # live holders already logged as waited for

    # --- the fence ----------------------------------------------------------------------

    def conditions(self, workflow_id: str | None = None) -> list[Expect]:
        if workflow_id is None:
            return []  # engine-scoped writes are not fenced per run
        claim = self.claims.get(workflow_id)
        if claim is None:
            raise EngineDeposedError(
                f"this engine does not hold the claim on workflow {workflow_id!r}",
                workflow_id=workflow_id,
            )
        if self._clock.now() * 1000 >= claim.expires_ms:
            # The store cannot compare times, so the check is made here, just before the
            # write is sent: past its expiry another engine may take the run over at any
            # moment, and nothing more may be written on the strength of this claim.
            self.lose(workflow_id, claim, "its claim expired before the write was sent")
            raise EngineDeposedError(
                f"the claim on workflow {workflow_id!r} expired at "
                f"{claim.expires_ms / 1000:.3f} (now {self._clock.now():.3f}); the write was "
                "refused and the run is left to whichever engine claims it next",
                workflow_id=workflow_id,
            )
        return [Expect(key=epoch_key(workflow_id), value=claim.epoch_bytes)]

    def valid_for(self, workflow_id: str) -> float:
        """Seconds the claim stays valid by this engine's clock (<= 0: expired or absent)."""
        claim = self.claims.get(workflow_id)
        if claim is None:
            return 0.0
        return claim.expires_ms / 1000 - self._clock.now()

    @property
    def margin(self) -> float:
        """A claim with less validity left than this is renewed before a step starts."""
        return MARGIN_RENEWALS * self.renew_interval

    async def before_write(self, workflow_id: str | None = None) -> None:
        """Just before a write for ``workflow_id`` is sent: a claim that has expired by this
        engine's clock is renewed first (a renewal proves nobody took it), or the write is
        refused: :class:`EngineDeposedError` if it was taken, :class:`StorageError` if the
        store does not answer. A valid claim costs nothing here."""
        if workflow_id is None or workflow_id not in self.claims or self.valid_for(workflow_id) > 0:
            return
        await self.confirm(workflow_id, margin=0.0)

    async def confirm(self, workflow_id: str, *, margin: float | None = None) -> None:
        """Before a side effect (an activity): raise unless the claim is still ours.

        Valid for more than the margin by this engine's clock: nothing to do. Otherwise
        (renewals were late or failing, or the process was paused) the claim is renewed
        now; a renewal that finds the claim taken over (or released) makes it lost
        (:class:`EngineDeposedError`), one the store does not answer raises
        :class:`StorageError` (the run is stopped and driven again once it answers).
        """
        claim = self.claims.get(workflow_id)
        if claim is None:
            raise EngineDeposedError(
                f"this engine no longer holds the claim on workflow {workflow_id!r}",
                workflow_id=workflow_id,
            )
        margin = self.margin if margin is None else margin
        if self.valid_for(workflow_id) > margin:
            return
        outcome = await self._renew_one(workflow_id, claim)
        if self.claims.get(workflow_id) is claim and self.valid_for(workflow_id) > margin:
            return  # renewed now (or an earlier renewal whose reply was lost had landed)
        if outcome == "unknown":
            raise StorageError(
                f"could not confirm the claim on workflow {workflow_id!r} (the store did not "
                "answer its renewal); the run waits until it does"
            )
        if outcome != "lost" and self.claims.get(workflow_id) is claim:
            self.lose(workflow_id, claim, "its claim could not be renewed in time")
        raise EngineDeposedError(
            f"the claim on workflow {workflow_id!r} lapsed before a step could start; the "
            "step was not started and the run is left to whichever engine claims it next",
            workflow_id=workflow_id,
        )

    async def disambiguate(self, workflow_id: str | None = None) -> None:
        if workflow_id is None:
            return
        claim = self.claims.get(workflow_id)
        try:
            current = await self._storage.get(epoch_key(workflow_id))
        except Exception:
            current = None
        if claim is None or current != claim.epoch_bytes:
            self.lose(workflow_id, claim)
            raise EngineDeposedError(
                f"workflow {workflow_id!r} was taken over by another engine",
                workflow_id=workflow_id,
            )

    def lose(self, workflow_id: str, claim: Claim | None, why: str = "taken over") -> None:
        if claim is not None and self.claims.get(workflow_id) is claim:
            del self.claims[workflow_id]
        log.warning(
            "engine %s lost its claim on workflow %s (%s)", self.engine_id, workflow_id, why
        )
        self._on_lost(workflow_id)

    # --- acquire ------------------------------------------------------------------------

    def _holder(self, epoch: int, claimed_at: float) -> tuple[bytes, int]:
        expires = int((self._clock.now() + self.ttl) * 1000)
        record: dict[str, object] = {
            "engine_id": self.engine_id,
            "epoch": epoch,
            "expires_at_ms": expires,
            "claimed_at": claimed_at,
        }
        if self.identity is not None:
            record.update(self.identity.fields())
        return json.dumps(record, separators=(",", ":")).encode(), expires

    def stale(self, holder: HolderRecord | None) -> bool:
        """May this engine take the claim over? Yes when there is no holder, when it has
        expired past its grace, or when it is a dead earlier incarnation of this engine."""
        if holder is None:
            return True
        grace_ms = GRACE_RENEWALS * self.renew_interval * 1000
        if holder.expires_at_ms + grace_ms < self._clock.now() * 1000:
            return True
        if self.identity is not None and provably_gone(holder.owner, self.identity):
            return True
        if holder.engine_id != self.engine_id and holder.engine_id not in self._waiting_on:
            self._waiting_on.add(holder.engine_id)
            who = holder.owner.describe() if holder.owner is not None else "engine"
            log.info(
                "runs claimed by %s [%s] wait for it: its claims expire at %.3f unless renewed",
                who,
                holder.engine_id,
                holder.expires_at_ms / 1000,
            )
        return False

    async def acquire_ops(self, workflow_id: str) -> ClaimPlan | None:
        """The writes and conditions that take the claim (to fold into the enabling batch).

        ``None`` when another engine holds a live claim.
        """
        holder_raw = await self._storage.get(holder_key(workflow_id))
        epoch_raw = await self._storage.get(epoch_key(workflow_id))
        if holder_raw is not None:
            holder = decode_holder(holder_raw)
            if holder is not None and holder.engine_id != self.engine_id and not self.stale(holder):
                return None
        return self._plan(workflow_id, holder_raw, epoch_raw)

    def fresh_ops(self, workflow_id: str) -> ClaimPlan:
        """The first claim on an id that never had one: conditioned on both keys absent."""
        return self._plan(workflow_id, None, None)

    def _plan(
        self, workflow_id: str, holder_raw: bytes | None, epoch_raw: bytes | None
    ) -> ClaimPlan:
        current = decode_epoch(epoch_raw) if epoch_raw is not None else 0
        new_epoch = encode_epoch(current + 1)
        now = self._clock.now()
        holder_bytes, expires = self._holder(current + 1, now)
        ops: list[Op] = [
            Put(key=epoch_key(workflow_id), value=new_epoch),
            Put(key=holder_key(workflow_id), value=holder_bytes),
        ]
        conds = [
            Expect(key=holder_key(workflow_id), value=holder_raw),
            Expect(key=epoch_key(workflow_id), value=epoch_raw),
        ]
        return ops, conds, Claim(workflow_id, new_epoch, holder_bytes, now, expires)

    def adopt(self, claim: Claim) -> None:
        self.claims[claim.workflow_id] = claim

    async def acquire(self, workflow_id: str) -> bool:
        """Take the claim on its own (resume, takeover). False if someone else holds it."""
        for _ in range(5):
            plan = await self.acquire_ops(workflow_id)
            if plan is None:
                return False
            ops, conds, claim = plan
            if await self._storage.conditional_batch(conds, ops):
                self.adopt(claim)
                return True
        return False

    async def acquire_many(self, found: list[tuple[str, bytes | None, bytes | None]]) -> list[str]:
        """Take several claims at once, each on the ``(id, holder bytes, epoch bytes)``
        just read; returns the ids taken. Each claim is its own conditional batch (one
        taken by another engine meanwhile fails alone); they are sent together, so the
        store groups them (one statement per group on PostgreSQL)."""

        async def take(workflow_id: str, holder_raw: bytes | None, epoch_raw: bytes | None) -> bool:
            try:
                ops, conds, claim = self._plan(workflow_id, holder_raw, epoch_raw)
                ok = await self._storage.conditional_batch(conds, ops)
            except Exception as exc:  # a corrupt epoch, or the store: the next scan retries
                log.warning("could not take over the claim on %s: %s", workflow_id, exc)
                return False
            if ok:
                self.adopt(claim)
            return ok

        taken = await asyncio.gather(*(take(*f) for f in found))
        return [f[0] for f, ok in zip(found, taken, strict=True) if ok]

    # --- renew and release --------------------------------------------------------------

    async def renew_all(self) -> None:
        """Extend every claim this engine holds (single flight)."""
        if self._renewing is not None and not self._renewing.done():
            return
        self._renewing = asyncio.get_running_loop().create_task(self._renew_all())
        await asyncio.shield(self._renewing)

    async def _renew_all(self) -> None:
        # Many claims per conditional batch: an idle engine with thousands of parked runs
        # renews them with a handful of statements per interval, not one per run. A batch
        # fails as a whole when any of its claims changed (a run finished or was taken
        # over meanwhile); its claims are then renewed one by one to find out which.
        # The batches go one after another: sent together, the store would group them
        # into one transaction whose key locks could exhaust PostgreSQL's lock table.
        held = list(self.claims.items())
        retry: list[tuple[str, Claim]] = []
        for i in range(0, len(held), RENEW_BATCH):
            retry += await self._renew_batch(held[i : i + RENEW_BATCH])
        if not retry:
            return
        limit = asyncio.Semaphore(_RENEW_CONCURRENCY)

        async def renew(workflow_id: str, claim: Claim) -> None:
            async with limit:
                await self._renew_one(workflow_id, claim)

        await asyncio.gather(*(renew(i, c) for i, c in retry))

    async def _renew_batch(self, chunk: list[tuple[str, Claim]]) -> list[tuple[str, Claim]]:
        """Renew ``chunk`` in one batch; returns the claims to retry one by one."""
        chunk = [(i, c) for i, c in chunk if self.claims.get(i) is c]  # released meanwhile
        if len(chunk) < 2:
            return chunk
        conds: list[Expect] = []
        ops: list[Op] = []
        fresh: list[tuple[bytes, int]] = []
        for workflow_id, claim in chunk:
            holder_bytes, expires = self._holder(decode_epoch(claim.epoch_bytes), claim.claimed_at)
            # The holder alone (one key lock per claim): it names this engine and its epoch,
            # and every change of the epoch rewrites or deletes it.
            conds.append(Expect(key=holder_key(workflow_id), value=claim.holder_bytes))
            ops.append(Put(key=holder_key(workflow_id), value=holder_bytes))
            fresh.append((holder_bytes, expires))
        try:
            ok = await self._storage.conditional_batch(conds, ops)
        except Exception as exc:
            log.warning("claim renewal of %d runs unconfirmable: %s", len(chunk), exc)
            return []  # the next pass (or a step's confirm) tries again
        if not ok:
            return chunk
        for (_, claim), (holder_bytes, expires) in zip(chunk, fresh, strict=True):
            claim.holder_bytes, claim.expires_ms = holder_bytes, expires
        return []

    async def _renew_one(self, workflow_id: str, claim: Claim) -> str:
        """Renew one claim: ``"renewed"``, ``"released"`` (this engine let it go
        meanwhile), ``"lost"`` (taken over) or ``"unknown"`` (the store did not answer)."""
        holder_bytes, expires = self._holder(decode_epoch(claim.epoch_bytes), claim.claimed_at)
        try:
            ok = await self._storage.conditional_batch(
                [
                    Expect(key=holder_key(workflow_id), value=claim.holder_bytes),
                    Expect(key=epoch_key(workflow_id), value=claim.epoch_bytes),
                ],
                [Put(key=holder_key(workflow_id), value=holder_bytes)],
            )
        except Exception as exc:
            log.warning("claim renewal for %s unconfirmable: %s", workflow_id, exc)
            return "unknown"
        if ok:
            claim.holder_bytes, claim.expires_ms = holder_bytes, expires
            return "renewed"
        if self.claims.get(workflow_id) is not claim:
            return "released"  # released meanwhile (the run finished or was suspended here)
        try:
            epoch_now = await self._storage.get(epoch_key(workflow_id))
        except Exception:
            return "unknown"  # cannot tell; the next fenced write or renewal will
        if epoch_now == claim.epoch_bytes:
            try:
                stored_raw = await self._storage.get(holder_key(workflow_id))
            except Exception:
                return "unknown"
            stored = decode_holder(stored_raw) if stored_raw is not None else None
            if stored_raw is not None and stored is not None and stored.engine_id == self.engine_id:
                # Our own record at our epoch: an earlier renewal landed but its reply
                # was lost. Expect those bytes from now on; the next renewal extends it.
                claim.holder_bytes, claim.expires_ms = stored_raw, stored.expires_at_ms
                return "unknown"
            # Same epoch, holder gone: this engine released it (finish or suspend commit
            # landed while the renewal was in flight). Nothing was lost.
            if self.claims.get(workflow_id) is claim:
                del self.claims[workflow_id]
            return "released"
        self.lose(workflow_id, claim)
        return "lost"

    def release_ops(self, workflow_id: str) -> list[Op]:
        """What the owner adds to a terminal or suspend commit: drop the holder, keep the epoch."""
        return [Delete(key=holder_key(workflow_id))] if workflow_id in self.claims else []

    def forget(self, workflow_id: str) -> None:
        self.claims.pop(workflow_id, None)

    async def release_all(self) -> None:
        """Best effort on shutdown: let other engines take our runs over at once."""
        if self._renewing is not None:
            await asyncio.gather(self._renewing, return_exceptions=True)
        await self.release_all_of(list(self.claims))

    async def release_all_of(self, workflow_ids: list[str]) -> None:
        async def release(workflow_id: str, claim: Claim) -> None:
            try:
                await self._storage.conditional_batch(
                    [
                        Expect(key=holder_key(workflow_id), value=claim.holder_bytes),
                        Expect(key=epoch_key(workflow_id), value=claim.epoch_bytes),
                    ],
                    [Delete(key=holder_key(workflow_id))],
                )
            except Exception:
                log.debug("could not release claim on %s", workflow_id, exc_info=True)

        held = [(i, c) for i in workflow_ids if (c := self.claims.pop(i, None)) is not None]
        # A few hundred at a time, so the store groups them (one statement per group on
        # PostgreSQL) instead of one round trip per claim: 100,000 claims at shutdown.
        for i in range(0, len(held), _RELEASE_BATCH):
            await asyncio.gather(*(release(w, c) for w, c in held[i : i + _RELEASE_BATCH]))


async def rotation_ops(storage: Storage, workflow_id: str) -> tuple[list[Op], list[Expect]]:
    """An external suspend/cancel/purge takes the run from its owner: bump the epoch and
    drop the holder, in the same batch as the state change."""
    epoch_raw = await storage.get(epoch_key(workflow_id))
    try:
        current = decode_epoch(epoch_raw) if epoch_raw is not None else 0
    except LeaseCorruptedError:
        current = 0
    ops: list[Op] = [
        Put(key=epoch_key(workflow_id), value=encode_epoch(current + 1)),
        Delete(key=holder_key(workflow_id)),
    ]
    return ops, [Expect(key=epoch_key(workflow_id), value=epoch_raw)]
