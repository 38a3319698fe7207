"""Wake-ups: how a run driven by one process hears about writes made by another.

A signal, update, query, review decision, cancel or suspend written by a
process that does not drive the run also writes ``wake:{id}`` in the same
batch. Every engine scans ``wake:`` once per poll interval and, for runs it
drives, reloads what changed, wakes the run, and deletes the marker. One scan
serves every run, however many are parked. On a store that can notify
(PostgreSQL's LISTEN/NOTIFY, or memory within one process) the writer also
announces the marker and every engine scans at once; the interval then only
covers notifications lost to a dropped connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from pyweft.engine import keys, records, run_queries
from pyweft.engine.commit import WAKE_TOPIC
from pyweft.engine.core import EngineCore
from pyweft.engine.run import Run
from pyweft.storage.base import Delete, Expect, Unlisten

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
            if run is None:
                state_raw = await core.storage.get(keys.wf(workflow_id))
                finished = state_raw is None or (
                    records.decode_state(state_raw).status in records.TERMINAL_STATUSES
                )
                # A marker of a finished (or purged) run is stale: nobody needs it.
                if not finished and (
                    not self._adopt_orphans or not await core.resume_run(workflow_id)
                ):
                    continue
                if not finished:
                    continue  # adopted just now: its queries wait for its handlers (next scan)
            else:
                await wake(core, run)
                if run.replaying:
                    continue  # its query handlers are not all back yet: look again next scan
                await run_queries.answer_pending(core, run)
            await core.committer.commit([Delete(key=key)], [Expect(key=key, value=raw)])
            handled += 1
        return handled


async def wake(core: EngineCore, run: Run) -> None:
    """Bring a live run up to date with its stored state, then let it look again."""
    raw = await core.storage.get(keys.wf(run.id))
    if raw is not None and raw != run.state_raw:
        state = records.decode_state(raw)
        if state.status != "running":
            # Suspended, or finished by someone else: stop driving without writing.
            run.tear_down(f"it is {state.status} in the store")
            return
        await run.adopt_state(state, raw)
    attrs_raw = await core.storage.get(keys.attributes(run.id))
    if attrs_raw is not None:
        stored = records.decode_attributes(attrs_raw)
        staged = keys.attributes(run.id) in run.staged
        # Attributes set from outside join the run's view; changes the run has not
        # committed yet win over them.
        run.attributes = {**stored, **run.attributes} if staged else {**run.attributes, **stored}
    run.updates_dirty = True
    run.signal_cache.clear()
    run.notify()
    if run.update_handlers and not run.replaying:
        from pyweft.engine.updates import process_updates

        asyncio.get_running_loop().create_task(process_updates(run))
