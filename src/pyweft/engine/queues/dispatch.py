"""The dispatcher: starts waiting runs of the engine's queues when their limits allow.

One task per engine. A pass over a queue partition reads, in this order, the
partition's dispatch counter, its slots (runs dispatched and not finished, from every
engine), its recent starts (rate limit) and the head of its waiting list; it then
moves as many waiting runs as the limits leave room for from ``enqueued`` to
``running`` in ONE conditional batch that also takes their slots and rewrites the
counter. Every dispatcher rewrites the counter, so when two engines race for the last
slots one batch fails and that engine looks again: the global ``concurrency`` holds
across engines. Between reads, an engine keeps a tally of the slots (``tally``). A
run's slot is deleted by the batch that ends it (see ``status_change_ops``), and only
then, so slots are freed exactly when runs finish: a run whose engine was killed keeps
its slot until the engine that recovers or takes it over finishes it, and the queue
never runs more than its limit meanwhile.

Passes are triggered by an enqueue here, a run of ours finishing, a notification
from another process (PostgreSQL), a timer on the engine's clock (rate-limit windows
and delays), and otherwise every poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from pyweft.clock import TimerHandle
from pyweft.engine.ownership.claims import Claim, ClaimPlan
from pyweft.engine.queues import layout
from pyweft.engine.queues.enqueue import QUEUE_TOPIC
from pyweft.engine.queues.queue import Queue
from pyweft.engine.queues.tally import SlotTally
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.driving import status_change_ops
from pyweft.engine.replay.records import WorkflowState
from pyweft.engine.replay.run import Run
from pyweft.observability import flow
from pyweft.storage.base import (
    Delete,
    Expect,
    Get,
    Op,
    Put,
    ReadResult,
    Scan,
    Unlisten,
    read_many,
)

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore

log = logging.getLogger("pyweft.queues")

MAX_BATCH = 200
"""Runs dispatched by one batch at most (a bigger backlog takes several passes)."""
_STOP_GRACE_S = 5.0  # how long shutdown waits for a dispatch batch under way
_SCAN_BUDGET = 5000  # waiting entries looked at per pass past ones not due / not ours


class Dispatcher:
    """Dispatches the waiting runs of the queues registered with one engine."""

    def __init__(
        self, core: EngineCore, queues: dict[str, Queue], engine_id: Callable[[], str]
    ) -> None:
        self._core = core
        self._queues = queues
        self._engine_id = engine_id
        self._me: bytes | None = None  # this engine's id, as slot records hold it
        self._dirty: set[str] = set()
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unlisten: Unlisten | None = None
        self._timers: dict[str, tuple[float, TimerHandle]] = {}
        self._foreign: set[str] = set()  # waiting runs this engine cannot drive
        self._unsure: set[str] = set()  # dispatched by a batch whose reply was lost
        self._notify = getattr(core.storage, "notify", None)
        # What this engine knows of the slots of a partition without a rate limit (see
        # tally.py): it saves the reads of a pass while this engine is the one
        # dispatching. Dropped at each poll and notification.
        self._known: dict[tuple[str, str], SlotTally] = {}
        # Runs dispatched here whose end this engine has not heard of yet, per partition.
        self._going: dict[tuple[str, str], set[str]] = {}
        # The next waiting runs of a FIFO partition, with their state records.
        self._ahead: dict[tuple[str, str], list[tuple[str, str, bytes | None]]] = {}
        self.dispatched = 0
        self._passing = False
        self._starting = False
        self._announcing: set[asyncio.Task[None]] = set()

    @property
    def started(self) -> bool:
        return self._starting

    async def start(self) -> None:
        if self._starting:
            return
        self._starting = True
        listen = getattr(self._core.storage, "listen", None)
        if listen is not None:
            try:
                self._unlisten = await listen(QUEUE_TOPIC, self.poke_all)
            except Exception as exc:
                log.warning("queue notifications unavailable (%s); polling only", exc)
        self.poke_all()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="pyweft-queues")

    async def stop(self) -> None:
        """Stop dispatching. A pass under way may finish its batch first (the engine is
        closing, so runs it starts stay stored as running for recovery)."""
        for _, timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._task is not None:
            self._kick.set()  # the loop sees the engine closing and returns
            _, late = await asyncio.wait([self._task], timeout=_STOP_GRACE_S)
            for task in late:
                task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        unlisten, self._unlisten = self._unlisten, None
        if unlisten is not None:
            await unlisten()

    def poke(self, queue: str) -> None:
        self._dirty.add(queue)
        self._kick.set()

    def poke_all(self) -> None:
        self._known.clear()
        self._ahead.clear()
        self._dirty.update(self._queues)
        self._kick.set()

    async def announce(self) -> None:
        """Tell the other processes on the store that a queue changed (best effort)."""
        if self._notify is not None:
            try:
                await self._notify(QUEUE_TOPIC)
            except Exception as exc:  # a lost notification is covered by polling
                log.debug("queue notification failed: %s", exc)

    # --- the loop ---------------------------------------------------------------------

    async def _loop(self) -> None:
        while self._core.state == "open":
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._core.poll_interval):
                    await self._kick.wait()
            polled = not self._kick.is_set()
            if polled:
                self._known.clear()  # the poll: read everything again
                self._ahead.clear()
                self._dirty.update(self._queues)
            self._kick.clear()
            dirty, self._dirty = self._dirty, set()
            self._passing = True
            try:
                await self._passes(dirty)
                hooks = flow.of(self._core.services)
                if polled and flow.wants(hooks, "observe_queue_depth"):
                    await self._report_depths(hooks)
            finally:
                self._passing = False

    async def _report_depths(self, hooks: tuple[object, ...]) -> None:
        """Each queue's waiting runs, for interceptors that watch depths (once a poll)."""
        storage = self._core.storage
        for name in sorted(self._queues):
            parts = [""]
            if self._queues[name].partitioned:
                found = await storage.scan(layout.marker_prefix(name))
                parts = [layout.last_part(k) for k, _ in found]
            depth = await flow.count(storage, [layout.waiting_prefix(name, p) for p in parts])
            flow.queue_depth(hooks, "workflow", name, depth)

    @property
    def busy(self) -> bool:
        """A pass is under way or asked for (the test kit waits before skipping time)."""
        return self._passing or self._kick.is_set()

    async def _passes(self, dirty: set[str]) -> None:
        for name in sorted(dirty):
            queue = self._queues.get(name)
            if queue is None or self._core.state != "open":
                continue
            try:
                await self.dispatch(queue)
            except asyncio.CancelledError:
                raise
            except Exception:
                self._known.clear()
                self._ahead.clear()
                log.exception("dispatching queue %s failed; retrying at the next poll", name)

    async def dispatch(self, queue: Queue) -> int:
        """One pass over every partition of ``queue``. Returns how many runs started."""
        if self._unsure:
            await self._settle_unsure()
        if not queue.partitioned:
            return await self._dispatch_partition(queue, "", None)
        started = 0
        for key, token in await self._core.storage.scan(layout.marker_prefix(queue.name)):
            started += await self._dispatch_partition(queue, layout.last_part(key), token)
        return started

    async def _dispatch_partition(self, queue: Queue, part: str, token: bytes | None) -> int:
        started = 0
        while self._core.state == "open":
            outcome = await self._pass(queue, part, token)
            if outcome is None:  # lost a race with another dispatcher: look again
                self._known.pop((queue.name, part), None)
                await asyncio.sleep(random.uniform(0.0, 0.005))
                continue
            started += outcome
            if outcome < MAX_BATCH:
                break
        return started

    async def _pass(self, queue: Queue, part: str, token: bytes | None) -> int | None:
        """Dispatch what the limits allow now: the number started, ``None`` on a lost race."""
        key = (queue.name, part)
        tally = self._known.get(key)
        if tally is not None:
            return await self._fill(queue, part, token, tally, [])
        storage = self._core.storage
        # The counter first: a slot added after this read comes with a counter change
        # that fails our batch, so the slots read next are never fewer than the truth.
        counter = await storage.get(layout.counter(queue.name, part))
        reads: list[Get | Scan] = [Scan(prefix=layout.slot_prefix(queue.name, part))]
        if queue.rate_limit is not None:
            reads.append(Scan(prefix=layout.starts_prefix(queue.name, part)))
        results = await read_many(storage, reads)
        slots = results[0]
        assert isinstance(slots, list)
        tally = SlotTally.read(counter, slots, self._my_id(), self._going.get(key, set()))
        if queue.rate_limit is not None:
            return await self._fill(queue, part, token, tally, results)
        self._known[key] = tally  # from now on, the runs of ours that end come off it
        started: int | None = None
        try:
            started = await self._fill(queue, part, token, tally, results)
        finally:
            if not started and self._known.get(key) is tally:
                del self._known[key]  # nothing started: the next pass reads afresh
        return started

    async def _fill(
        self,
        queue: Queue,
        part: str,
        token: bytes | None,
        tally: SlotTally,
        results: list[ReadResult],
    ) -> int | None:
        """Start what the limits leave room for, given ``tally`` (and for a rate limit,
        the starts in ``results``): the number started, ``None`` on a lost race."""
        core, name = self._core, queue.name
        storage = core.storage
        held, mine = tally.held, tally.mine
        now = core.clock.now()
        room = MAX_BATCH
        if queue.concurrency is not None:
            room = min(room, queue.concurrency - held)
        if queue.worker_concurrency is not None:
            room = min(room, queue.worker_concurrency - mine)
        expired: list[str] = []
        if queue.rate_limit is not None and queue.rate_window_s is not None:
            starts = results[1]
            assert isinstance(starts, list)
            since = now - queue.rate_window_s
            recent = [k for k, _ in starts if layout.time_part(k) > since]
            expired = [k for k, _ in starts if layout.time_part(k) <= since]
            room = min(room, queue.rate_limit[0] - len(recent))
            if (
                room <= 0
                and recent
                and await storage.scan(layout.waiting_prefix(name, part), limit=1)
            ):
                # Runs wait: look again when the oldest start leaves the window.
                self._arm(name, layout.time_part(recent[0]) + queue.rate_window_s)
        if room <= 0:
            return 0
        ahead = self._ahead.pop((name, part), None)
        if ahead and len(ahead) >= room:
            # Read ahead by the last pass (see _read_ahead): no reads needed now. With
            # fewer than there is room for, the head is read instead: runs enqueued since
            # may fill the rest, and no enqueue may come to ask for another pass.
            picked, rest = ahead[:room], ahead[room:]
            if rest:
                self._ahead[(name, part)] = rest
            exhausted = False
        else:
            entries, next_due, exhausted = await self._head(queue, part, room, now)
            if next_due is not None:
                self._arm(name, next_due)
            picked = await self._with_states(entries)
        if not picked:
            if exhausted and not held and token is not None:
                marker = layout.marker(name, part)  # an empty partition: forget it
                await core.committer.commit([Delete(key=marker)], [Expect(key=marker, value=token)])
            return 0
        counter = tally.counter
        chosen = await self._start(queue, part, picked, counter, expired, now)
        if chosen is None:
            self._ahead.pop((name, part), None)  # something changed: read afresh
            return None
        if chosen and queue.rate_limit is None:
            # At once, before any await: a run just started may end during the next one.
            tally.took(chosen, _next(counter))
            self._known[(name, part)] = tally
        if chosen and (name, part) not in self._ahead:
            await self._read_ahead(queue, part, now)
        return len(chosen)

    async def _head(
        self, queue: Queue, part: str, room: int, now: float
    ) -> tuple[list[tuple[str, str]], float | None, bool]:
        """Up to ``room`` waiting entries that are due and drivable here, in order, as
        ``(key, run id)``; the earliest not-before time seen that is still to come; and
        whether the whole waiting list was seen."""
        storage = self._core.storage
        prefix = layout.waiting_prefix(queue.name, part)
        picked: list[tuple[str, str]] = []
        next_due: float | None = None
        start: str | None = None
        seen = 0
        page = max(room, 32)
        while len(picked) < room and seen < _SCAN_BUDGET:
            rows = await storage.scan(prefix, start=start, limit=page)
            for key, value in rows:
                seen += 1
                run_id = layout.last_part(key)
                if run_id in self._foreign:
                    continue
                if value:
                    due = float(value.decode())
                    if due > now:
                        next_due = due if next_due is None else min(next_due, due)
                        continue
                picked.append((key, run_id))
                if len(picked) >= room:
                    break
            if len(rows) < page:
                return picked, next_due, True
            start = keys.after(rows[-1][0])
        return picked, next_due, False

    async def _with_states(
        self, entries: list[tuple[str, str]]
    ) -> list[tuple[str, str, bytes | None]]:
        raws = await read_many(self._core.storage, [Get(key=keys.wf(i)) for _, i in entries])
        return [
            (key, run_id, raw if isinstance(raw, bytes) else None)
            for (key, run_id), raw in zip(entries, raws, strict=True)
        ]

    async def _read_ahead(self, queue: Queue, part: str, now: float) -> None:
        """Read the next runs of a FIFO queue while the ones just started run, so that
        the pass that follows a slot freeing only has to write. Their state records
        are the conditions of that write: a run changed meanwhile (cancelled) fails it,
        and the pass reads again. A priority queue reads its head at every pass, since
        a run enqueued later (by another process) may belong before those read."""
        if queue.priority:
            return
        entries, next_due, _ = await self._head(
            queue, part, min(MAX_BATCH, queue.concurrency or 64), now
        )
        if next_due is not None:
            self._arm(queue.name, next_due)
        if entries:
            self._ahead[(queue.name, part)] = await self._with_states(entries)

    async def _start(
        self,
        queue: Queue,
        part: str,
        picked: list[tuple[str, str, bytes | None]],
        counter: bytes | None,
        expired: list[str],
        now: float,
    ) -> list[str] | None:
        """Move ``picked`` from waiting to running in one batch conditional on ``counter``
        and launch them here: the ids started, ``None`` if the batch lost a race."""
        core = self._core
        services = core.services_or_raise()
        ops: list[Op] = [Delete(key=k) for k in expired]
        conds: list[Expect] = []
        chosen: list[tuple[WorkflowState, bytes, Claim | None]] = []
        waited: list[float] = []  # seconds each chosen run waited (dispatch latency)
        claims = core.claims
        me = self._my_id()
        plans: dict[str, ClaimPlan | None] = {}
        if claims is not None:  # under workflow-lease: the claims join the dispatch batch
            ids = [run_id for _, run_id, raw in picked if raw is not None]
            found = await asyncio.gather(*(claims.acquire_ops(i) for i in ids))
            plans = dict(zip(ids, found, strict=True))
        for wait_key, run_id, raw in picked:
            if raw is None:
                ops.append(Delete(key=wait_key))  # the run is gone (purged): drop its entry
                continue
            try:
                state = records.decode_state(raw, key=keys.wf(run_id))
            except Exception:
                log.exception("queue %s: run %s is unreadable; left waiting", queue.name, run_id)
                self._foreign.add(run_id)
                continue
            if state.status != "enqueued":
                # Left the queue already (the batch that moved it deleted this entry, or
                # should have): make sure it is gone.
                ops.append(Delete(key=wait_key))
                continue
            definition = core.workflows.get(state.type)
            if definition is None or definition.version != state.version:
                self._foreign.add(run_id)  # for an engine that has its code
                continue
            plan = plans.get(run_id)
            if claims is not None and plan is None:
                continue  # another engine holds it (it is starting it)
            slot_key = layout.slot(queue.name, part, run_id)
            new = msgspec.structs.replace(
                state,
                status="running",
                updated_at=now,
                start_at=None,
                queue_wait_key=None,
                queue_slot_key=slot_key,
            )
            new_raw = records.encode(new)
            ops.append(Put(key=keys.wf(run_id), value=new_raw))
            ops += status_change_ops(state, new)
            ops.append(Put(key=slot_key, value=me))
            if queue.rate_limit is not None:
                ops.append(Put(key=layout.start(queue.name, part, now, run_id), value=b""))
            conds.append(Expect(key=keys.wf(run_id), value=raw))
            if plan is not None:
                ops += plan[0]
                conds += plan[1]
            chosen.append((new, new_raw, plan[2] if plan is not None else None))
            waited.append(now - (state.start_at or state.created_at))
        if not chosen:
            if ops:
                await core.committer.commit(ops)
            return []
        counter_key = layout.counter(queue.name, part)
        ops.append(Put(key=counter_key, value=_next(counter)))
        conds.append(Expect(key=counter_key, value=counter))
        try:
            ok = await core.committer.commit(ops, conds)
        except Exception:
            self._unsure.update(state.id for state, _, _ in chosen)
            raise
        if not ok:
            return None
        going = self._going.setdefault((queue.name, part), set())
        for new, new_raw, claim in chosen:
            if claim is not None and claims is not None:
                claims.adopt(claim)
            core.emit("started", new, queue=queue.name, partition_key=part or None)
            run = Run(services, core.workflows[new.type], new, new_raw, {}, {})
            going.add(new.id)
            core.launch(run)
            run.done.add_done_callback(functools.partial(self._finished, queue.name, part, new.id))
        self.dispatched += len(chosen)
        if hooks := flow.of(services):
            for seconds in waited:
                flow.dispatched(hooks, "workflow", queue.name, seconds)
        return [new.id for new, _, _ in chosen]

    def _my_id(self) -> bytes:
        """The engine's id (fixed once it is open; computing the default costs a hash of
        its registrations, so it is computed once)."""
        if self._me is None:
            self._me = self._engine_id().encode()
        return self._me

    def _finished(
        self, queue: str, part: str, run_id: str, done: asyncio.Future[WorkflowState]
    ) -> None:
        key = (queue, part)
        going = self._going.get(key)
        if going is not None:
            going.discard(run_id)
            if not going:
                del self._going[key]
        ended = not done.cancelled() and done.exception() is None
        if ended and done.result().status in records.TERMINAL_STATUSES:
            # Its end committed, and with it the deletion of its slot.
            tally = self._known.get(key)
            if tally is not None:
                tally.ended(run_id)
        else:
            self._known.pop(key, None)  # stopped without ending: read again
        self.poke(queue)
        if self._notify is not None and self._core.state == "open":
            task = asyncio.get_running_loop().create_task(self.announce())
            self._announcing.add(task)  # held until done (the loop keeps weak references)
            task.add_done_callback(self._announcing.discard)

    async def _settle_unsure(self) -> None:
        """Runs a batch with a lost reply may have started: drive those that did."""
        unsure, self._unsure = self._unsure, set()
        for run_id in unsure:
            raw = await self._core.storage.get(keys.wf(run_id))
            if raw is not None and records.decode_state(raw).status == "running":
                await self._core.resume_run(run_id)

    def _arm(self, queue: str, when: float) -> None:
        """Pass over ``queue`` again at ``when`` on the engine's clock."""
        held = self._timers.get(queue)
        if held is not None and held[0] <= when:
            return
        if held is not None:
            held[1].cancel()

        def due() -> None:
            self._timers.pop(queue, None)
            # A run whose delay ended may belong before the runs read ahead: read again.
            for key in [k for k in self._ahead if k[0] == queue]:
                del self._ahead[key]
            self.poke(queue)

        self._timers[queue] = (when, self._core.clock.call_at(when, due))


def _next(counter: bytes | None) -> bytes:
    value = int.from_bytes(counter, "big") if counter else 0
    return (value + 1).to_bytes(8, "big")
