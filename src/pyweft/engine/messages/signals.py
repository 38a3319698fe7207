"""Signals: durable one-way messages into a run.

Sending writes the signal to a per-run buffer (and, with a ``signal_id``, an
accepted marker that makes retries no-ops) in one atomic batch, then wakes the
run. ``ctx.wait_for_signal`` consumes the oldest buffered signal of that name:
its deletion, conditioned on the exact bytes read, is written in the same
commit as the step that returns it, so a crash before that commit leaves the
signal buffered and it is delivered again.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from pyweft.engine.replay import keys, records, waits
from pyweft.engine.replay.operations import operation
from pyweft.engine.replay.records import PendingStep, SignalRecord, StepRecord, WorkflowState
from pyweft.engine.replay.run import Run
from pyweft.engine.replay.services import RunServices
from pyweft.errors import WorkflowTerminalError, WorkflowUsageError
from pyweft.storage.base import Delete, Expect, Get, Op, Put, read_many

if TYPE_CHECKING:
    from pyweft.engine.replay.residency import Residency

MAX_SIGNAL_ID_BYTES = 128
MAX_NAME_BYTES = 200
_SCAN_BATCH = 256
_MAX_SEND_ATTEMPTS = 100


def check_name(name: object, what: str) -> str:
    """A signal, update or query name (or memo key, change id...) fit to store and print."""
    return keys.check_text(name, f"{what} name" if what in _NAMED else what, MAX_NAME_BYTES)


_NAMED = ("signal", "update", "query")


def check_signal_id(signal_id: object) -> str:
    return keys.check_text(signal_id, "signal_id", MAX_SIGNAL_ID_BYTES)


def terminal_error(state: WorkflowState, what: str) -> WorkflowTerminalError:
    return WorkflowTerminalError(
        f"workflow {state.id!r} is {state.status}; it cannot take {what}",
        workflow_id=state.id,
        status=state.status,
    )


# --- the workflow side --------------------------------------------------------------


@operation
async def wait_for_signal(run: Run, step: int, name: str, timeout_s: float | None) -> Any:
    """Return the payload of the oldest buffered ``name`` signal, waiting if there is none."""
    rec = run.replay(step, "signal", name)
    if rec is not None:
        codec = run.services.codec
        if rec.ok:
            return codec.decode(rec.value) if rec.value is not None else None
        raise waits.timeout_error(run, step, "signal", name)
    if name in run.signal_handlers:
        raise WorkflowUsageError(mixing_error(name))
    await run.enter_live()
    clock = run.services.clock
    pend = run.take_pending(step, "signal", name)
    started = pend.first_started_at if pend else clock.now()
    deadline = pend.deadline if pend else (None if timeout_s is None else started + timeout_s)
    run.signal_waits[name] = run.signal_waits.get(name, 0) + 1
    try:
        return await _take(run, step, name, pend, started, deadline)
    finally:
        run.signal_waits[name] -= 1
        if not run.signal_waits[name]:
            del run.signal_waits[name]


def mixing_error(name: str) -> str:
    return (
        f"signal {name!r} has a handler (ctx.on_signal) and a ctx.wait_for_signal: each "
        "signal would go to one of them by chance. Use one or the other for a name (the "
        "handler can set a value that ctx.wait_until waits for)."
    )


async def _take(
    run: Run,
    step: int,
    name: str,
    pend: PendingStep | None,
    started: float,
    deadline: float | None,
) -> Any:
    codec, clock = run.services.codec, run.services.clock
    while True:
        seen = run.wake_seq  # before looking: a signal that lands after the look wakes the park
        head = await _next_signal(run, name)
        if head is not None:
            key, raw = head
            _saw(run, name, key)  # a cache filled at load has no mark yet
            signal = records.decode_signal(raw)
            done = StepRecord(
                step=step,
                kind="signal",
                name=name,
                ok=True,
                started_at=started,
                finished_at=clock.now(),
                value=signal.payload,
            )
            ok = await run.commit_step(done, [Delete(key=key)], [Expect(key=key, value=raw)])
            _drop(run, name, key)
            if ok:
                return codec.decode(signal.payload)
            continue  # the signal changed under us; look again
        if deadline is not None and clock.now() >= deadline:
            raise await waits.record_timeout(run, step, "signal", name, started)
        pend = await waits.park(run, step, "signal", name, deadline, started, pend, seen)


async def _next_signal(run: Run, name: str) -> tuple[str, bytes] | None:
    cache = run.signal_cache.get(name)
    if not cache:
        arrivals = run.signal_arrivals.get(name, 0)
        run.signal_synced.discard(name)
        rows = await run.services.storage.scan(keys.signal_prefix(run.id, name), limit=_SCAN_BATCH)
        cache = run.signal_cache[name] = list(reversed(rows))  # pop() takes the oldest
        if rows:
            _saw(run, name, rows[-1][0])
        # The cache is complete only if it holds everything buffered: no more than one
        # batch, and no signal committed while the scan ran (it may be missing from it).
        if len(rows) < _SCAN_BATCH and run.signal_arrivals.get(name, 0) == arrivals:
            run.signal_synced.add(name)
    return cache[-1] if cache else None


def _drop(run: Run, name: str, key: str) -> None:
    cache = run.signal_cache.get(name)
    if cache and cache[-1][0] == key:
        cache.pop()
    else:
        run.signal_cache.pop(name, None)


def forget_buffered(run: Run, name: str) -> None:
    """The store may hold ``name`` signals the cache lacks: look there next time."""
    run.signal_cache.pop(name, None)
    run.signal_synced.discard(name)
    run.signal_arrivals[name] = run.signal_arrivals.get(name, 0) + 1  # a scan in flight too
    if name in run.signal_handlers:
        run.signals_dirty = True
    run.notify()


def buffered(run: Run, name: str, key: str, raw: bytes) -> None:
    """A signal was just committed for this run: add it to the cache if the cache is complete.

    The sender says so only once its commit has returned, and the run may have looked
    in the store in between: it then found the signal there, and may even have
    consumed it already (the cache is empty again). A signal no newer than any the
    cache ever held is therefore never added: it was seen, and consuming it twice
    would fail on its deleted bytes (issue 16).
    """
    run.signal_arrivals[name] = run.signal_arrivals.get(name, 0) + 1
    cache = run.signal_cache.get(name)
    if cache is not None and name in run.signal_synced and key > run.signal_seen.get(name, ""):
        cache.insert(0, (key, raw))
        _saw(run, name, key)
    if name in run.signal_handlers:
        run.signals_dirty = True
    run.notify()


def _saw(run: Run, name: str, key: str) -> None:
    # Signal keys of one name sort by their arrival sequence, so the newest key ever
    # cached is a high-water mark: anything at or below it was in the store already.
    if key > run.signal_seen.get(name, ""):
        run.signal_seen[name] = key


# --- the sending side ---------------------------------------------------------------


def _driven_here(runs: dict[str, Run], residency: Residency | None, workflow_id: str) -> bool:
    return workflow_id in runs or (residency is not None and residency.holds(workflow_id))


@dataclass
class SignalSender:
    """Buffers signals durably and wakes the run if this engine drives it."""

    services: RunServices
    runs: dict[str, Run]
    residency: Residency | None = None

    def __post_init__(self) -> None:
        # Weak values: a lock lives only while some sender holds it.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def encode(self, payload: object) -> bytes:
        data = self.services.codec.encode(payload)
        limit = self.services.max_payload_bytes
        if len(data) > limit:
            from pyweft.codec import payload_size_error

            raise payload_size_error(len(data), limit, what="signal payload")
        return data

    async def send(
        self, workflow_id: str, name: str, payload: object, signal_id: str | None
    ) -> bool:
        """Buffer the signal. Returns ``False`` when ``signal_id`` was already accepted."""
        check_name(name, "signal")
        if signal_id is not None:
            check_signal_id(signal_id)
        data = self.encode(payload)
        lock = self._locks.get(workflow_id)
        if lock is None:
            lock = self._locks[workflow_id] = asyncio.Lock()
        async with lock:  # senders in this process take turns: no CAS storms
            if self.residency is None:
                return await self._send_locked(workflow_id, name, data, signal_id, [])
            async with self.residency.sending(workflow_id) as extra:
                return await self._send_locked(workflow_id, name, data, signal_id, extra)

    async def _send_locked(
        self, workflow_id: str, name: str, data: bytes, signal_id: str | None, extra: list[Op]
    ) -> bool:
        from pyweft.engine.visibility.reader import not_found

        storage = self.services.storage
        accepted = keys.signal_accepted(workflow_id, name, signal_id) if signal_id else None
        state_key, seq_key = keys.wf(workflow_id), keys.signal_seq(workflow_id)
        # One trip to the store for every read the send needs.
        reads = [Get(key=state_key), Get(key=seq_key)]
        if accepted is not None:
            reads.insert(1, Get(key=accepted))
        for _ in range(_MAX_SEND_ATTEMPTS):
            found = cast("list[bytes | None]", await read_many(storage, reads))
            state_raw, seq_raw = found[0], found[-1]
            if state_raw is None:
                raise not_found(workflow_id)
            if accepted is not None and found[1] is not None:
                return False  # a resend: accepted before, even if the run has ended since
            state = records.decode_state(state_raw)
            if state.status in records.TERMINAL_STATUSES:
                raise terminal_error(state, f"signal {name!r}")
            seq = int(seq_raw or b"0") + 1
            key = keys.signal(workflow_id, name, seq)
            raw = records.encode(
                SignalRecord(
                    name=name,
                    seq=seq,
                    payload=data,
                    sent_at=self.services.clock.now(),
                    signal_id=signal_id,
                )
            )
            ops: list[Op] = [
                Put(key=key, value=raw),
                Put(key=seq_key, value=str(seq).encode()),
                *extra,
            ]
            conds = [
                Expect(key=state_key, value=state_raw),
                Expect(key=seq_key, value=seq_raw),
            ]
            if accepted is not None:
                ops.append(Put(key=accepted, value=key.encode()))
                conds.append(Expect(key=accepted, value=None))
            if not _driven_here(self.runs, self.residency, workflow_id):
                # Driven elsewhere (or nowhere): leave a wake-up for that engine.
                ops.append(Put(key=keys.wake(workflow_id), value=keys.wake_value()))
            try:
                committed = await self.services.committer.commit(ops, conds)
            except BaseException:
                # The signal may be stored after all (a lost reply): a run driven here must
                # not trust its cache of buffered signals, or it could take a later one
                # first. It rescans the store in order at its next look.
                run = self.runs.get(workflow_id)
                if run is not None:
                    forget_buffered(run, name)
                raise
            if committed:
                run = self.runs.get(workflow_id)
                if run is not None:
                    buffered(run, name, key, raw)
                    run.emit("signal_received", name=name, signal_id=signal_id)
                elif self.residency is not None:
                    self.residency.wake(
                        workflow_id, unmarked=bool(extra)
                    )  # evicted: replayed, it finds the signal
                return True
        raise RuntimeError(f"could not buffer signal {name!r} for {workflow_id!r}: contention")

    def start_ops(
        self, workflow_id: str, name: str, data: bytes, signal_id: str | None, now: float
    ) -> tuple[list[Op], list[Expect]]:
        """The writes that buffer a run's first signal inside its create batch."""
        key = keys.signal(workflow_id, name, 1, start=True)
        raw = records.encode(
            SignalRecord(name=name, seq=1, payload=data, sent_at=now, signal_id=signal_id)
        )
        ops: list[Op] = [
            Put(key=key, value=raw),
            Put(key=keys.signal_seq(workflow_id), value=b"1"),
        ]
        conds = [Expect(key=keys.signal_seq(workflow_id), value=None)]
        if signal_id is not None:
            accepted = keys.signal_accepted(workflow_id, name, signal_id)
            ops.append(Put(key=accepted, value=key.encode()))
            conds.append(Expect(key=accepted, value=None))
        return ops, conds
