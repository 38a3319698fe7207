"""The run cache: which idle runs stay in memory, and how evicted ones come back.

A run parked in a wait (signal, update, condition, review, sleep) needs nothing
but memory. Past ``max_cached_runs`` idle runs in memory, the engine evicts those idle
longest: their task is stopped (as at shutdown, nothing is written for the run)
and all that stays is the id and the time the run must wake up at (a wait's
timeout, a sleep's end, the run's execution timeout), in one heap served by one
clock timer. The run stays this engine's: ``is_running_here`` is true, and under
``workflow-lease`` its claim is renewed with the others. Whatever concerns it
brings it back by replaying its journal: a message sent from this process, a
wake-up marker left by another, a query, a cancel or suspend, its deadline.

Where one engine drives every run of the store (ownership ``"none"`` or
``"lease"``), an evicted run also leaves ``park:{id}`` in the store, so that the
next engine to open the store takes it as parked without replaying it. A
marker is only valid while nothing the run may care about has happened since:
senders in this process delete it in the same batch as their message (and no
marker is written while such a send is in flight), other processes leave a
wake-up marker that every engine looks at first, and a restore deletes it before
the replay. At shutdown the engine marks its idle runs the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import msgspec

from pyweft.clock import TimerHandle
from pyweft.engine.replay import keys
from pyweft.engine.replay.records import TERMINAL_STATUSES
from pyweft.engine.replay.recovery import ids_with_status
from pyweft.engine.replay.run import Run
from pyweft.storage.base import Delete, Op, Put

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore

log = logging.getLogger("pyweft.residency")

DEFAULT_MAX_CACHED_RUNS = 10_000
PARK_PREFIX = "park:"
_PAGE = 5000
_MARK_BATCH = 500
_WARM_CONCURRENCY = 64
_ADOPT_CONCURRENCY = 8  # runs just taken over, replayed in the background
_BUSY_RETRY_S = 0.05  # a parked run kept in memory by a write under way: look again then
_RETRY_S = 1.0  # a restore that failed on a storage error is tried again this much later


def park_key(workflow_id: str) -> str:
    return PARK_PREFIX + keys.enc(workflow_id)


class _Parked(msgspec.Struct, array_like=True):
    type: str
    version: str
    wake_at: float | None


class Residency:
    """This engine's runs that are parked out of memory, and the cache bound."""

    def __init__(self, core: EngineCore, max_cached_runs: int = DEFAULT_MAX_CACHED_RUNS) -> None:
        self._core = core
        self.max_cached_runs = max_cached_runs
        self.markers = True
        """Write ``park:`` markers (only where one engine drives every run)."""
        self.evicted: dict[str, float | None] = {}  # id -> when it must wake up
        self.marked: set[str] = set()  # ids that may have a park marker in the store
        self._evicting: dict[str, tuple[Run, asyncio.Future[None]]] = {}
        self._restoring: dict[str, asyncio.Task[None]] = {}
        self._reviving: set[str] = set()  # restores past their marker, inside resume_run
        self._woken: set[str] = set()
        self._sending: dict[str, int] = {}
        self._marking: dict[str, asyncio.Event] = {}
        self._idle: OrderedDict[str, None] = OrderedDict()
        self._heap: list[tuple[float, str]] = []
        self._timer: TimerHandle | None = None
        self._timer_at: float | None = None
        self._sweep_due = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self.evictions = 0
        self.restores = 0

    # --- questions --------------------------------------------------------------------

    def holds(self, workflow_id: str) -> bool:
        """True when the run is this engine's but not (or not yet, or no longer) in memory."""
        evicting = self._evicting.get(workflow_id)
        return (
            workflow_id in self.evicted
            or workflow_id in self._restoring
            or (evicting is not None and evicting[0].state.status not in TERMINAL_STATUSES)
        )

    def reviving(self, workflow_id: str) -> bool:
        """True while a restore of the run is replaying it into memory. ``holds`` is false
        by then (``resume_run`` refuses a run held as evicted), yet the run is still ours."""
        return workflow_id in self._reviving

    def __len__(self) -> int:
        return len(self.evicted)

    # --- eviction -----------------------------------------------------------------------

    def idle(self, run: Run) -> None:
        """A run's every live step is now a parked wait: it may be evicted, oldest first."""
        core = self._core
        if core.state != "open":
            return
        if run.id not in self._idle:
            run.done.add_done_callback(lambda _: self._idle.pop(run.id, None))
        self._idle[run.id] = None
        self._idle.move_to_end(run.id)
        self._maybe_sweep()

    def _maybe_sweep(self) -> None:
        if not self._sweep_due and len(self._idle) > self.max_cached_runs:
            self._sweep_due = True
            asyncio.get_running_loop().call_soon(self._sweep)

    def _parked(self, run: Run) -> bool:
        """Idle in a wait, live, not ending, not being evicted already."""
        return (
            run.idle
            and run.task is not None
            and not run.done.done()
            and not (run.stopping or run.cancel_requested or run.terminating or run.fatal)
            and run.id not in self._evicting
        )

    def _writing(self, run: Run) -> bool:
        """A write for the run is under way (staged effects, an update, a message)."""
        return bool(
            run.staged or run.deferred or run.update_lock.locked() or self._sending.get(run.id)
        )

    def _evictable(self, run: Run) -> bool:
        return self._parked(run) and not self._writing(run)

    def _sweep(self) -> None:
        self._sweep_due = False
        if self._core.state != "open":
            return
        # The bound is on idle runs: a run woken to finish its work (a burst of signals
        # to parked runs) must not push out another parked run that would then have to
        # be replayed in its turn; runs at work stay in memory whatever the bound.
        excess = len(self._idle) - self.max_cached_runs
        chosen: list[Run] = []
        later: list[str] = []
        while excess > 0 and self._idle:
            workflow_id, _ = self._idle.popitem(last=False)
            run = self._core.runs.get(workflow_id)
            if run is not None and self._parked(run) and self._writing(run):
                later.append(workflow_id)  # kept in memory only by a write under way
                continue
            if run is not None and self._parked(run):
                chosen.append(run)
            # else: at work again, or gone; it left the idle runs the bound counts.
            excess -= 1
        if chosen:
            self._spawn(self._evict(chosen))
        if later:
            # Parked, but a write for it (an update's answer, a message) is in flight: no
            # later park would bring it back here, so look again shortly.
            for workflow_id in later:
                self._idle[workflow_id] = None
            asyncio.get_running_loop().call_later(_BUSY_RETRY_S, self._maybe_sweep)

    async def _evict(self, runs: list[Run]) -> None:
        seqs = {run.id: run.wake_seq for run in runs}
        wakes = {run.id: run.next_wake() for run in runs}
        loop = asyncio.get_running_loop()
        for run in runs:
            self._evicting[run.id] = (run, loop.create_future())
        try:
            if self.markers:
                await self._mark(runs, wakes)
        except Exception as exc:
            log.warning("could not mark %d idle run(s) parked (%s); kept in memory", len(runs), exc)
            for run in runs:
                self._evicting.pop(run.id)[1].set_result(None)
            return
        for run in runs:
            run.stop("evicted from memory while idle; replayed when woken")
        await asyncio.gather(*(r.task for r in runs if r.task is not None), return_exceptions=True)
        woken = [r.id for r in runs if self._evicted(r, wakes[r.id], seqs[r.id])]
        if self._core.state == "open":
            for workflow_id in woken:
                self._start_restore(workflow_id)  # something came for it meanwhile
            self._maybe_sweep()  # runs that parked while these were being evicted
        elif stale := [park_key(i) for i in woken if i in self.marked]:
            # Closing: the next engine must replay these, not take them as parked.
            with contextlib.suppress(Exception):
                await self._core.committer.commit([Delete(key=k) for k in stale])

    def _evicted(self, run: Run, wake_at: float | None, seq: int) -> bool:
        """Record an evicted run. True if something came for it while it was evicted."""
        _, done = self._evicting.pop(run.id)
        done.set_result(None)
        # Woken: news came, or a cancel or timeout reached it while it was being stopped.
        woken = run.wake_seq != seq or run.id in self._woken
        woken = woken or run.cancel_requested or run.terminating is not None
        self._woken.discard(run.id)
        if run.state.status in TERMINAL_STATUSES:
            return False  # it finished meanwhile; a stale marker would only cost a replay
        if self._core.state == "open":
            self.evictions += 1
            self.evicted[run.id] = wake_at
            if wake_at is not None:
                self._push(wake_at, run.id)
        return woken

    async def _mark(self, runs: list[Run], wakes: dict[str, float | None]) -> None:
        """Write the park markers of ``runs``; no send to them is in flight, and sends that
        come meanwhile wait for the write, then delete the marker with their message."""
        events = {run.id: asyncio.Event() for run in runs}
        self._marking.update(events)
        try:
            ops: list[Op] = [
                Put(
                    key=park_key(run.id),
                    value=msgspec.msgpack.encode(
                        _Parked(run.state.type, run.state.version, wakes[run.id])
                    ),
                )
                for run in runs
            ]
            for i in range(0, len(ops), _MARK_BATCH):
                await self._core.committer.commit(ops[i : i + _MARK_BATCH])
            self.marked.update(events)
        finally:
            for workflow_id, event in events.items():
                del self._marking[workflow_id]
                event.set()

    # --- messages from this process -------------------------------------------------------

    @contextlib.asynccontextmanager
    async def sending(self, workflow_id: str) -> AsyncIterator[list[Op]]:
        """Around a message write for a run: yields the ops to add to its batch (deleting
        the run's park marker, if it may have one). No marker is written meanwhile."""
        while (event := self._marking.get(workflow_id)) is not None:
            await event.wait()
        self._sending[workflow_id] = self._sending.get(workflow_id, 0) + 1
        try:
            yield [Delete(key=park_key(workflow_id))] if workflow_id in self.marked else []
        finally:
            left = self._sending[workflow_id] - 1
            if left:
                self._sending[workflow_id] = left
            else:
                del self._sending[workflow_id]

    def wake(self, workflow_id: str, *, unmarked: bool = False) -> None:
        """Something for a held run was just committed in this process: bring it back.
        ``unmarked``: that batch deleted its park marker (the restore need not)."""
        if unmarked:
            self.marked.discard(workflow_id)
        if workflow_id in self._evicting or workflow_id in self._restoring:
            self._woken.add(workflow_id)  # evicting: restored when done; restoring: it looks
        elif workflow_id in self.evicted:
            self._start_restore(workflow_id)

    # --- restoring ------------------------------------------------------------------------

    async def restore(self, workflow_id: str) -> Run | None:
        """Bring a held run back into memory and past its replay (its handlers are
        registered again). Returns the run, or ``None`` if it is no longer ours to drive."""
        core = self._core
        while (evicting := self._evicting.get(workflow_id)) is not None:
            await asyncio.shield(evicting[1])
        task = self._restoring.get(workflow_id)
        if task is None and workflow_id in self.evicted:
            task = self._start_restore(workflow_id)
        if task is not None:
            await asyncio.shield(task)
        run = core.runs.get(workflow_id)
        if run is None:
            return None
        spins = 0
        while run.replaying and not run.done.done():
            spins += 1
            await asyncio.sleep(0 if spins < 100 else 0.001)
        return run

    def _start_restore(self, workflow_id: str) -> asyncio.Task[None]:
        task = self._restoring.get(workflow_id)
        if task is not None:
            return task
        task = asyncio.get_running_loop().create_task(
            self._restore(workflow_id), name=f"pyweft-restore:{workflow_id}"
        )
        self._restoring[workflow_id] = task
        self._core.loading.setdefault(workflow_id, task)  # settled() waits for it
        return task

    async def _restore(self, workflow_id: str) -> None:
        core = self._core
        try:
            self.evicted.pop(workflow_id, None)
            self._arm()
            if workflow_id in self.marked:
                try:
                    await core.committer.commit([Delete(key=park_key(workflow_id))])
                except Exception as exc:
                    log.warning("could not bring back run %s yet (%s); retrying", workflow_id, exc)
                    self._retry_later(workflow_id)
                    return
                self.marked.discard(workflow_id)
        finally:
            if self._restoring.get(workflow_id) is asyncio.current_task():
                del self._restoring[workflow_id]
            if core.loading.get(workflow_id) is asyncio.current_task():
                del core.loading[workflow_id]
        self._woken.discard(workflow_id)
        if core.state != "open":
            return
        self._reviving.add(workflow_id)
        try:
            if await core.resume_run(workflow_id):
                self.restores += 1
        except Exception as exc:
            log.warning("could not bring back run %s yet (%s); retrying", workflow_id, exc)
            self._retry_later(workflow_id)
        finally:
            self._reviving.discard(workflow_id)

    def _retry_later(self, workflow_id: str) -> None:
        if self._core.state == "open" and workflow_id not in self._core.runs:
            wake_at = self._core.clock.now() + _RETRY_S
            self.evicted[workflow_id] = wake_at
            self._push(wake_at, workflow_id)

    # --- deadlines ------------------------------------------------------------------------

    def _push(self, wake_at: float, workflow_id: str) -> None:
        heapq.heappush(self._heap, (wake_at, workflow_id))
        if len(self._heap) > 2 * len(self.evicted) + 1024:  # drop entries of restored runs
            self._heap = [(w, i) for w, i in self._heap if self.evicted.get(i) == w]
            heapq.heapify(self._heap)
        self._arm()

    def _arm(self) -> None:
        """Keep one clock timer, at the earliest wake-up of a run still evicted."""
        heap = self._heap
        while heap and self.evicted.get(heap[0][1], -1.0) != heap[0][0]:
            heapq.heappop(heap)  # that run came back (or was evicted again since)
        first = heap[0][0] if heap and self._core.state == "open" else None
        if first == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_at = None
        if first is not None:
            self._timer_at = first
            self._timer = self._core.clock.call_at(first, self._due)

    def _due(self) -> None:
        self._timer = self._timer_at = None
        now = self._core.clock.now()
        while self._heap and self._heap[0][0] <= now:
            wake_at, workflow_id = heapq.heappop(self._heap)
            if workflow_id in self.evicted and self.evicted[workflow_id] == wake_at:
                self._start_restore(workflow_id)
        self._arm()

    # --- opening and closing ----------------------------------------------------------

    async def load_parked(self) -> int:
        """Take the runs an earlier engine left parked (``park:`` markers) as evicted here,
        without replaying them. Returns how many."""
        core = self._core
        storage = core.storage
        running = set(await ids_with_status(storage, "running"))
        stale: list[Op] = []
        start: str | None = None
        while True:
            rows = await storage.scan(PARK_PREFIX, start=start, limit=_PAGE)
            for key, raw in rows:
                workflow_id = keys.dec(key[len(PARK_PREFIX) :])
                try:
                    parked = msgspec.msgpack.decode(raw, type=_Parked)
                except msgspec.DecodeError:
                    parked = None
                if parked is None or workflow_id not in running:
                    stale.append(Delete(key=key))
                    continue
                definition = core.workflows.get(parked.type)
                if definition is None or definition.version != parked.version:
                    continue  # recovery says why, and leaves or fails it
                self.evicted[workflow_id] = parked.wake_at
                self.marked.add(workflow_id)
                if parked.wake_at is not None:
                    self._heap.append((parked.wake_at, workflow_id))
            if len(rows) < _PAGE:
                break
            start = rows[-1][0] + "\x00"
        heapq.heapify(self._heap)
        for i in range(0, len(stale), _MARK_BATCH):
            await core.committer.commit(stale[i : i + _MARK_BATCH])
        self._arm()
        return len(self.evicted)

    def adopt(self, workflow_ids: list[str]) -> None:
        """Runs whose claims this engine just took over: held as evicted (ours, not yet
        in memory), replayed in the background, and at once by whatever concerns them
        (a message, a query), so thousands of runs move without a long replay first."""
        for workflow_id in workflow_ids:
            self.evicted.setdefault(workflow_id, None)
        if workflow_ids:
            # Few at a time: what concerns one of them is served first, not behind the rest.
            self._spawn(self._warm(workflow_ids, _ADOPT_CONCURRENCY))

    def warm_up(self) -> None:
        """After opening: bring parked runs back into memory, in the background, up to the
        cache bound, so a store with few runs behaves as if nothing had been evicted."""
        room = self.max_cached_runs - len(self._core.runs)
        chosen = [i for i, _ in zip(self.evicted, range(max(0, room)), strict=False)]
        if chosen:
            self._spawn(self._warm(chosen))

    async def _warm(self, ids: list[str], concurrency: int = _WARM_CONCURRENCY) -> None:
        limit = asyncio.Semaphore(concurrency)

        async def one(workflow_id: str) -> None:
            async with limit:
                if workflow_id in self.evicted and self._core.state == "open":
                    await asyncio.shield(self._start_restore(workflow_id))

        await asyncio.gather(*(one(i) for i in ids), return_exceptions=True)

    async def close(self) -> None:
        """On shutdown: finish evictions under way and mark idle runs parked for the next
        engine (only while no message to them is in flight; senders are refused by now)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_at = None
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if not self.markers:
            return
        runs = [r for r in self._core.runs.values() if self._evictable(r)]
        if not runs:
            return
        seqs = {r.id: r.wake_seq for r in runs}
        try:
            await self._mark(runs, {r.id: r.next_wake() for r in runs})
        except Exception as exc:
            log.warning("could not mark idle runs parked (%s); they are replayed at open", exc)
            return
        moved = [park_key(r.id) for r in runs if r.wake_seq != seqs[r.id] or not r.idle]
        if moved:  # woken meanwhile: the next engine must replay them
            with contextlib.suppress(Exception):
                await self._core.committer.commit([Delete(key=k) for k in moved])

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
