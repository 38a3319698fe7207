"""Wake-ups: how a run driven by one process hears about writes made by another.

A signal, update, query, review decision, cancel or suspend written by a
process that does not drive the run also writes ``wake:{id}`` in the same
batch. Every engine scans ``wake:`` once per poll interval and, for runs it
drives, reloads what changed, wakes the run, and deletes the marker; a run
evicted from memory (see residency) is replayed first. One scan serves every
run, however many are parked, and it is the only thing that looks at the store
for a parked run: waits never poll. On a store that can notify (PostgreSQL's
LISTEN/NOTIFY, or memory within one process) the writer also announces the
marker and every engine scans at once; the interval then only covers
notifications lost to a dropped connection. The first scan runs as soon as the
engine is open, for markers left while no engine was.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, cast

from pyweft.engine.messages import run_queries
from pyweft.engine.replay import keys, quarantine, records
from pyweft.engine.replay.commit import WAKE_TOPIC
from pyweft.engine.replay.run import Run
from pyweft.errors import CorruptRecordError
from pyweft.storage.base import Delete, Expect, Get, Unlisten, read_many

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore

log = logging.getLogger("pyweft.wakeups")

_BATCH = 1000


class WakeupPoller:
    """Scans for wake markers of runs this engine drives."""

    def __init__(self, core: EngineCore, *, adopt_orphans: bool) -> None:
        self._core = core
        # With one engine per store (and recovery on), a running run that nobody here
        # drives (e.g. resumed from the CLI) is ours to pick up.
        self._adopt_orphans = adopt_orphans
        self._task: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._unlisten: Unlisten | None = None

    async def start(self) -> None:
        listen = getattr(self._core.storage, "listen", None)
        if listen is not None:
            try:
                self._unlisten = await listen(WAKE_TOPIC, self._heard)
            except Exception as exc:
                log.warning("wake-up notifications unavailable (%s); polling only", exc)
        self._kick.set()  # markers left while the store had no engine: look at once
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="pyweft-wakeups")

    def _heard(self) -> None:
        self._kick.set()
        self._core.heard_from_store()  # e.g. a query waiting for its answer looks again

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        unlisten, self._unlisten = self._unlisten, None
        if unlisten is not None:
            await unlisten()

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._core.poll_interval):
                    await self._kick.wait()
            self._kick.clear()
            try:
                await self.poll()
            except Exception:
                log.exception("wake-up poll failed; trying again next interval")

    async def poll(self) -> int:
        """Handle every wake marker of a run driven here. Returns how many."""
        core = self._core
        handled = 0
        for key, raw in await core.storage.scan("wake:", limit=_BATCH):
            workflow_id = keys.dec(key[len("wake:") :])
            run = core.runs.get(workflow_id)
            if run is None and core.residency.holds(workflow_id):
                # Evicted: the replay reads everything afresh, then it answers questions.
                restored = await core.residency.restore(workflow_id)
                if restored is not None and not restored.done.done():
                    await run_queries.answer_pending(core, restored)
            elif run is None:
                state_key = keys.wf(workflow_id)
                state_raw = await core.storage.get(state_key)
                try:
                    state = (
                        records.decode_state(state_raw, key=state_key)
                        if state_raw is not None
                        else None
                    )
                except CorruptRecordError:
                    state = None  # not ours to judge: adopting it below quarantines it
                    finished = False
                else:
                    # A blocked run waits for code that replays it, not for messages: they
                    # stay stored for it, and its marker has done its job.
                    finished = (
                        state is None
                        or state.status in records.TERMINAL_STATUSES
                        or state.status == "blocked"
                    )
                if state is not None and state.status == "pending":
                    # Created for later by a client: arm its start timer here.
                    if not self._adopt_orphans or state.type not in core.workflows:
                        continue
                    if workflow_id not in core.pending_timers:
                        core.arm_pending(state)
                    finished = True  # nothing more to adopt: the marker has done its job
                # A marker of a finished (or purged) run is stale: nobody needs it.
                if not finished and (
                    not self._adopt_orphans or not await core.resume_run(workflow_id)
                ):
                    continue
                if not finished:
                    continue  # adopted just now: its queries wait for its handlers (next scan)
            else:
                try:
                    await wake(core, run)
                except CorruptRecordError as exc:  # one damaged run must not stall the others
                    await quarantine.report(core, workflow_id, exc)
                    continue
                if run.replaying:
                    continue  # its query handlers are not all back yet: look again next scan
                await run_queries.answer_pending(core, run)
            await core.committer.commit([Delete(key=key)], [Expect(key=key, value=raw)])
            handled += 1
        return handled


async def wake(core: EngineCore, run: Run) -> None:
    """Bring a live run up to date with its stored state, then let it look again."""
    # One trip to the store for both records (a wake-up is on the path of every message
    # and async completion that comes from another process).
    found = await read_many(
        core.storage, [Get(key=keys.wf(run.id)), Get(key=keys.attributes(run.id))]
    )
    raw, attrs_raw = cast("bytes | None", found[0]), cast("bytes | None", found[1])
    if raw is not None and raw != run.state_raw:
        state = records.decode_state(raw, key=keys.wf(run.id))
        if state.status != "running":
            # Suspended, or finished by someone else: stop driving without writing.
            run.tear_down(f"it is {state.status} in the store")
            return
        await run.adopt_state(state, raw)
    if attrs_raw is not None:
        stored = records.decode_attributes(attrs_raw, key=keys.attributes(run.id))
        staged = keys.attributes(run.id) in run.staged
        # Attributes set from outside join the run's view; changes the run has not
        # committed yet win over them.
        run.attributes = {**stored, **run.attributes} if staged else {**run.attributes, **stored}
    run.updates_dirty = run.signals_dirty = True
    run.signal_cache.clear()
    run.notify()
    if run.update_handlers and not run.replaying:
        from pyweft.engine.messages.updates import process_updates

        asyncio.get_running_loop().create_task(process_updates(run))
