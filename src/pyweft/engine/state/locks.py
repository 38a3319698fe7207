"""Durable locks and semaphores across runs: ``async with ctx.lock("supplier-42"):``.

One record per lock (``lk:{name}``) holds its holders and its FIFO queue of
waiters; every change is a compare-and-swap on that record.

- **Acquire** is a step. A run takes a permit only when one is free and nobody
  waits ahead of it (no barging); otherwise it joins the queue and parks (no
  polling) until a release wakes it, or until the earliest holder lease expires.
- **Leases.** Holders and waiters carry a lease their engine renews while the run
  is alive (every third of the lease). An entry whose lease expired (its engine
  died) is dropped by whoever looks next, so a dead engine cannot hold a lock or
  block the queue forever.
- **Release** is a step too, written with the record change and wake-up markers
  for the runs that may now go, in one batch. The ``async with`` releases on every
  exit, an exception or a cancellation included.
- **Replay.** A recovered run replays its recorded acquire. If no release follows
  in its journal, it checks it still holds the lock; if its lease expired and the
  lock went to another run meanwhile, it queues again and waits before going on,
  so code after the acquire never runs live without the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from types import TracebackType
from typing import Any

import msgspec

from pyweft.durations import DurationLike, parse_duration
from pyweft.engine.replay import keys
from pyweft.engine.replay.operations import operation
from pyweft.engine.replay.records import StepRecord
from pyweft.engine.replay.run import RACE_BRANCH, Run
from pyweft.errors import InvalidArgumentError, WorkflowUsageError
from pyweft.storage.base import Expect, Op, Put

log = logging.getLogger("pyweft.locks")

PREFIX = "lk:"
MAX_PERMITS = 10_000


class Entry(msgspec.Struct, array_like=True):
    run_id: str
    token: int  # the acquire step's number: one run may take the same lock again later
    expires_at: float


class LockRecord(msgspec.Struct, array_like=True):
    permits: int
    holders: list[Entry] = []
    waiters: list[Entry] = []


_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(LockRecord)


def lock_key(name: str) -> str:
    return PREFIX + keys.enc(name)


def _decode(raw: bytes | None, permits: int) -> LockRecord:
    if raw is None:
        return LockRecord(permits=permits)
    return _dec.decode(raw)


def _mine(entries: list[Entry], run_id: str, token: int) -> Entry | None:
    return next((e for e in entries if e.run_id == run_id and e.token == token), None)


def _pruned(rec: LockRecord, now: float) -> LockRecord:
    return LockRecord(
        permits=rec.permits,
        holders=[e for e in rec.holders if e.expires_at > now],
        waiters=[e for e in rec.waiters if e.expires_at > now],
    )


# Runs of this process parked on a lock, by (store, key): a release here wakes them at
# once; runs in other processes get a wake-up marker in the release batch.
_parked: dict[tuple[int, str], weakref.WeakSet[Run]] = {}


def _wake_local(run: Run, key: str) -> None:
    for other in list(_parked.get((id(run.services.storage), key), ())):
        other.notify()


async def _change(run: Run, key: str, permits: int, edit: Any) -> tuple[LockRecord, bool]:
    """Read the record, ``edit(rec) -> (new rec, extra ops) | None`` and CAS it (retried)."""
    storage = run.services.storage
    while True:
        raw = await storage.get(key)
        rec = _pruned(_decode(raw, permits), run.services.clock.now())
        edited = edit(rec)
        if edited is None:
            return rec, False
        new, extra = edited
        ops: list[Op] = [Put(key=key, value=_enc.encode(new)), *extra]
        if await run.services.committer.commit(
            ops, [Expect(key=key, value=raw)], workflow_id=run.id
        ):
            return new, True


class Lock:
    """``async with ctx.lock(name, permits=1, lease="5m"):`` (see the module docstring)."""

    def __init__(self, run: Run, name: str, permits: int, lease: DurationLike) -> None:
        self._run = run
        self.name = keys.check_text(name, "lock name", 200)
        if type(permits) is not int or not 1 <= permits <= MAX_PERMITS:
            raise InvalidArgumentError(
                f"permits must be an int in 1..{MAX_PERMITS}, got {permits!r}"
            )
        self.permits = permits
        self.lease_s = parse_duration(lease, field="lease")
        if self.lease_s < 1:
            raise InvalidArgumentError(f"lease must be at least 1 second, got {lease!r}")
        self.key = lock_key(self.name)
        self._token: int | None = None
        self._renewer: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Lock:
        if RACE_BRANCH.get() is not None:
            raise WorkflowUsageError("ctx.lock(...) cannot be used inside a ctx.race branch")
        run = self._run
        self._token = await _acquire(run, run.alloc_step(), self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        run, token = self._run, self._token
        if token is None:
            return
        self._stop_renewing()
        if run.torn_down is not None:
            return  # the engine stopped driving the run: its lease lapses, others reclaim
        await _release(run, run.alloc_step(), self, token)

    # --- leases ---------------------------------------------------------------------

    def renew_while_alive(self, token: int, *, holding: bool) -> None:
        self._stop_renewing()
        self._renewer = asyncio.get_running_loop().create_task(self._renew(token, holding))
        run_done = self._run.done
        run_done.add_done_callback(lambda _: self._stop_renewing())

    def _stop_renewing(self) -> None:
        if self._renewer is not None and not self._renewer.done():
            self._renewer.cancel()
        self._renewer = None

    async def _renew(self, token: int, holding: bool) -> None:
        run = self._run
        try:
            while not run.stopping:
                await _clock_sleep(run, self.lease_s / 3)
                await _change(run, self.key, self.permits, _renewal(run, token, holding, self))
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # the lease lapses; whoever looks next reclaims it
            log.warning("lock %r: could not renew the lease of run %s: %s", self.name, run.id, exc)


def _renewal(run: Run, token: int, holding: bool, lock: Lock) -> Any:
    expires = run.services.clock.now() + lock.lease_s

    def edit(rec: LockRecord) -> tuple[LockRecord, list[Op]] | None:
        mine = _mine(rec.holders if holding else rec.waiters, run.id, token)
        if mine is None:
            return None
        mine.expires_at = expires
        return rec, []

    return edit


async def _clock_sleep(run: Run, seconds: float) -> None:
    """Sleep on the engine clock (not a workflow wait: the renewal is the engine's)."""
    clock = run.services.clock
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def fire() -> None:
        if not fut.done():
            fut.set_result(None)

    handle = clock.call_at(clock.now() + seconds, fire)
    try:
        await fut
    finally:
        handle.cancel()


def _released_later(run: Run, name: str, token: int) -> bool:
    """Whether the journal ahead records the release of this acquire."""
    codec = run.services.codec
    for rec in run.journal.values():
        if rec.kind == "lock" and rec.name == f"release {name}" and rec.value is not None:
            with contextlib.suppress(Exception):
                if codec.decode(rec.value) == token:
                    return True
    return False


@operation
async def _acquire(run: Run, step: int, lock: Lock) -> int:
    rec = run.replay(step, "lock", f"acquire {lock.name}")
    if rec is not None:
        if not _released_later(run, lock.name, step):
            await _hold(run, lock, step, record_step=False)  # still ours, or wait again
        return step
    await run.enter_live()
    await _hold(run, lock, step, record_step=True)
    return step


async def _hold(run: Run, lock: Lock, token: int, *, record_step: bool) -> None:
    """Take a permit (queueing and parking until one is ours); with ``record_step``, the
    acquire step is recorded in the same batch as the record change."""
    clock = run.services.clock
    started = clock.now()
    key = (id(run.services.storage), lock.key)
    while True:
        now = clock.now()
        storage = run.services.storage
        raw = await storage.get(lock.key)
        current = _pruned(_decode(raw, lock.permits), now)
        expires = now + lock.lease_s
        holding = _mine(current.holders, run.id, token)
        ahead = [w for w in current.waiters if not (w.run_id == run.id and w.token == token)]
        first_in_line = not current.waiters or (
            current.waiters[0].run_id == run.id and current.waiters[0].token == token
        )
        if holding is not None or (len(current.holders) < current.permits and first_in_line):
            new = LockRecord(
                permits=current.permits,
                holders=[e for e in current.holders if e is not holding]
                + [Entry(run_id=run.id, token=token, expires_at=expires)],
                waiters=ahead,
            )
            ops: list[Op] = [Put(key=lock.key, value=_enc.encode(new))]
            conds = [Expect(key=lock.key, value=raw)]
            if record_step:
                done = StepRecord(
                    step=token,
                    kind="lock",
                    name=f"acquire {lock.name}",
                    ok=True,
                    started_at=started,
                    finished_at=clock.now(),
                )
                landed = await run.commit_step(done, ops, conds)
            else:
                landed = await run.services.committer.commit(ops, conds, workflow_id=run.id)
            if landed:
                _parked.get(key, weakref.WeakSet()).discard(run)
                lock.renew_while_alive(token, holding=True)
                return
            continue
        waiting = _mine(current.waiters, run.id, token)
        if waiting is None:
            queued = LockRecord(
                permits=current.permits,
                holders=current.holders,
                waiters=[*current.waiters, Entry(run_id=run.id, token=token, expires_at=expires)],
            )
            put = Put(key=lock.key, value=_enc.encode(queued))
            cond = Expect(key=lock.key, value=raw)
            if not await run.services.committer.commit([put], [cond], workflow_id=run.id):
                continue
            lock.renew_while_alive(token, holding=False)
        _parked.setdefault(key, weakref.WeakSet()).add(run)
        # Wake at a release (notify) or when the earliest holder's lease runs out.
        wake_at = min((h.expires_at for h in current.holders), default=None)
        seen = run.wake_seq
        try:
            await run.live(run.changed(wake_at, seen))
        except BaseException:
            _parked.get(key, weakref.WeakSet()).discard(run)
            lock._stop_renewing()
            if run.torn_down is None:
                await _leave_queue(run, lock, token)
            raise


async def _leave_queue(run: Run, lock: Lock, token: int) -> None:
    """A cancelled waiter steps out of the queue (and lets the next one look)."""

    def edit(rec: LockRecord) -> tuple[LockRecord, list[Op]] | None:
        if _mine(rec.waiters, run.id, token) is None:
            return None
        rec.waiters = [w for w in rec.waiters if not (w.run_id == run.id and w.token == token)]
        return rec, _wake_ops(rec)

    with contextlib.suppress(Exception):
        await asyncio.shield(_change(run, lock.key, lock.permits, edit))
        _wake_local(run, lock.key)


def _wake_ops(rec: LockRecord) -> list[Op]:
    """Wake-up markers for the waiters that may take the free permits now."""
    free = max(0, rec.permits - len(rec.holders))
    return [Put(key=keys.wake(w.run_id), value=keys.wake_value()) for w in rec.waiters[:free]]


@operation
async def _release(run: Run, step: int, lock: Lock, token: int) -> None:
    name = f"release {lock.name}"
    if run.replay(step, "lock", name) is not None:
        return
    await run.enter_live()
    clock = run.services.clock
    started = clock.now()
    payload = run.services.codec.encode(token)
    while True:
        raw = await run.services.storage.get(lock.key)
        rec = _pruned(_decode(raw, lock.permits), clock.now())
        rec.holders = [h for h in rec.holders if not (h.run_id == run.id and h.token == token)]
        ops: list[Op] = [Put(key=lock.key, value=_enc.encode(rec)), *_wake_ops(rec)]
        done = StepRecord(
            step=step,
            kind="lock",
            name=name,
            ok=True,
            started_at=started,
            finished_at=clock.now(),
            value=payload,
        )
        if await run.commit_step(done, ops, [Expect(key=lock.key, value=raw)]):
            _wake_local(run, lock.key)
            return


async def inspect_lock(storage: Any, name: str, now: float) -> dict[str, Any]:
    """What an operator sees of a lock: permits, live holders and waiters (FIFO)."""
    key = lock_key(keys.check_text(name, "lock name", 200))
    raw = await storage.get(key)
    rec = _pruned(_decode(raw, 1), now) if raw is not None else LockRecord(permits=0)
    return {
        "name": name,
        "permits": rec.permits,
        "holders": [{"workflow_id": e.run_id, "expires_at": e.expires_at} for e in rec.holders],
        "waiters": [{"workflow_id": e.run_id, "expires_at": e.expires_at} for e in rec.waiters],
    }
