"""The engine's ownership surface: who may drive which run. Sets up the file lock, the
store lease or run claims for the ownership mode, runs the claim renewal and reclaim
cycle, and reports ownership (``store_ownership``, ``lease_health``, ``engine_id``).
``Engine`` inherits it; the work happens in ``engine/ownership``."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Literal

from pyweft.clock import Clock, TimerHandle
from pyweft.engine.ownership import StoreOwnership, read_ownership, store_label
from pyweft.engine.ownership.claims import ClaimRegistry
from pyweft.engine.ownership.identity import default_engine_id
from pyweft.engine.ownership.lease import LeaseHealth, LeaseManager
from pyweft.errors import ConfigurationError
from pyweft.storage.file_lock import StoreFileLock
from pyweft.storage.sqlite import SQLiteStorage

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore
    from pyweft.engine.engine import Engine

log = logging.getLogger("pyweft.engine")


class OwnershipAPI:
    """Ownership of the store and its runs (mixed into :class:`~pyweft.Engine`)."""

    _core: EngineCore
    clock: Clock
    instance_id: str
    role: Literal["engine", "client"]
    ownership: str
    _engine_id: str | None
    _recover: bool
    _detect_second_instance: bool
    _ownership_options: dict[str, float]
    _store_lock: StoreFileLock | None
    _lease: LeaseManager | None
    _claim_timer: TimerHandle | None
    _claim_task: asyncio.Task[None] | None
    _renew_task: asyncio.Task[None] | None

    def _as_engine(self) -> Engine:
        return self  # type: ignore[return-value]  # only ever mixed into Engine

    def _use_ownership(self, mode: str) -> None:
        """Set up what ``mode`` needs: the file lock, the store lease, or run claims."""
        if mode == "workflow-lease" and self._detect_second_instance:
            raise ConfigurationError(
                "detect_second_instance is for ownership='none' or 'lease'; with "
                "'workflow-lease' (the default on PostgreSQL) several engines share the store "
                "on purpose. Pass ownership='none' or 'lease' explicitly to use the detector"
            )
        store, opts = self._core.storage, self._ownership_options
        self.ownership = mode
        self._store_lock, self._lease, self._core.claims = None, None, None
        if self.role == "client":
            return  # a client takes no lock, no lease and no claims: it never drives runs
        if mode == "none" and isinstance(store, SQLiteStorage) and not store.read_only:
            self._store_lock = StoreFileLock(store.path)
        elif mode == "lease":
            self._lease = LeaseManager(
                store,
                self.clock,
                self.instance_id,
                ttl_s=opts["lease_ttl"],
                renew_interval_s=opts["lease_renew_interval"],
                wait_timeout_s=opts["lease_wait_timeout"],
                poll_interval_s=opts["poll_interval"],
                on_deposed=self._deposed,
            )
        elif mode == "workflow-lease":
            self._core.claims = ClaimRegistry(
                store,
                self.clock,
                self.instance_id,
                ttl_s=opts["claim_ttl"],
                renew_interval_s=opts["claim_renew_interval"],
                on_lost=self._core.claim_lost,
            )

    @property
    def engine_id(self) -> str:
        """This engine's stable identity: ``Engine(engine_id=...)``, or host + store +
        registered workflow types. A restarted engine with the same id takes back the
        lease and claims of its previous incarnation at once when that process is dead."""
        if self._engine_id is None:
            return default_engine_id(store_label(self._core.storage), self._core.workflows)
        return self._engine_id

    def _arm_claims(self) -> None:
        """Renew our claims and take over abandoned runs, every claim renewal interval.

        Two independent single-flight tasks: a reclaim scan busy taking over thousands
        of runs must never hold up the renewal of the claims this engine already has
        (its peers would then take healthy runs from it).
        """
        claims = self._core.claims
        if claims is None or self._core.state != "open":
            return

        def due() -> None:
            if self._core.state != "open":
                return
            loop = asyncio.get_running_loop()
            if self._renew_task is None or self._renew_task.done():
                self._renew_task = loop.create_task(self._renew_cycle())
            if self._claim_task is None or self._claim_task.done():
                self._claim_task = loop.create_task(self._claim_cycle())
            self._arm_claims()

        self._claim_timer = self.clock.call_at(self.clock.now() + claims.renew_interval, due)

    async def _renew_cycle(self) -> None:
        claims = self._core.claims
        if claims is None:
            return
        try:
            await claims.renew_all()
        except Exception:
            log.exception("claim renewal failed; retrying next interval")

    async def _claim_cycle(self) -> None:
        if not self._recover:  # recover=False: this engine drives only the runs it starts
            return
        try:
            await self._core.reclaim()
            await self._core.adopt_blocked()  # e.g. runs of our version blocked elsewhere
        except Exception:
            log.exception("reclaim scan failed; retrying next interval")

    async def reclaim(self) -> int:
        """``workflow-lease``: take over runs whose owner stopped renewing; returns how many."""
        self._core.services_or_raise()
        return await self._core.reclaim()

    def _deposed(self, reason: str) -> None:
        """Another engine took the lease: stop everything, on a later loop iteration."""
        loop = asyncio.get_running_loop()
        loop.call_soon(lambda: loop.create_task(self._as_engine().shutdown()))

    async def store_ownership(self) -> StoreOwnership:
        """What the store records about ownership: its mode marker, the store lease (holder,
        epoch, expiry) and how many run claims are live. Reads only."""
        self._core.services_or_raise()
        return await read_ownership(self._core.storage, self.clock.now())

    def lease_health(self) -> LeaseHealth:
        """The store lease as this engine sees it (``no-lease`` unless ``ownership="lease"``)."""
        return self._lease.health() if self._lease is not None else LeaseHealth(state="no-lease")
