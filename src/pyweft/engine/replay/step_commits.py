"""How a run records its steps: outcomes, progress records, staged side effects.

Every write of a step goes through :class:`StepCommits` (mixed into
:class:`~pyweft.engine.replay.run.Run`), fenced by the engine's committer and
conditioned on the step's journal record being absent, so a step is recorded
once whoever else drives the run.

**Deferred outcomes.** A step whose outcome is already stored elsewhere until
the step's record replaces it (an activity a worker ran: its result record
stays until the batch that writes the step deletes it) need not be committed
on its own. :meth:`StepCommits.defer_step` hands the outcome to the workflow at
once and writes the record with the run's next commit, usually the next step's
progress record (for a run of worker activities: the next task), so each step
costs one commit instead of two. Nothing is lost by waiting: until that commit,
replay finds the open progress record and the result record it points at, and
takes the outcome from there without running the activity again. A wait that
may be long writes them first (see ``Run.live``), and so does the run's end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pyweft.engine.replay import keys, records
from pyweft.engine.replay.flow import RACE_BRANCH, RACE_PENDINGS, Deferred, Superseded
from pyweft.engine.replay.records import PendingStep, StepRecord
from pyweft.errors import StorageError
from pyweft.storage.base import Delete, Expect, Op, Put

if TYPE_CHECKING:
    from pyweft.engine.replay.services import RunServices
    from pyweft.errors import RunTornDown


class StepCommits:
    """The step-recording half of a run (mixed into ``Run``)."""

    id: str
    services: RunServices
    staged: dict[str, Op]
    deferred: Deferred
    unsaved: dict[int, StepRecord]
    logical_now: float
    torn_down: RunTornDown | None
    _open_pendings: set[int]
    _journal_prefix: str
    _torn_down_error: Callable[[str], RunTornDown]
    emit: Callable[..., None]

    async def commit_step(
        self, rec: StepRecord, ops: list[Op] | None = None, conds: list[Expect] | None = None
    ) -> bool:
        """Record a step's outcome with the side effects that must land with it.

        Returns ``False`` when one of ``conds`` failed (nothing was written);
        raises :class:`Superseded` when another writer recorded this step.
        """
        branch = RACE_BRANCH.get()
        if branch is not None:
            branch.append((rec, list(ops or ()), list(conds or ())))
            return True
        return await self.commit_steps([(rec, list(ops or ()), list(conds or ()))])

    def defer_step(self, rec: StepRecord, ops: list[Op]) -> bool:
        """Record ``rec`` with the run's next commit instead of one of its own.

        Only for an outcome stored elsewhere until ``ops`` (which must delete it)
        land with the record; see the module docstring. ``False`` when it cannot
        wait (inside a race branch, which collects its own steps): commit it now.
        """
        self._refuse_if_torn_down()
        if RACE_BRANCH.get() is not None:
            return False
        self.deferred.append((rec, ops, []))
        # The workflow sees the outcome now, so its clock moves now (as on replay).
        if rec.step < keys.HANDLER_STEP_BASE and rec.finished_at > self.logical_now:
            self.logical_now = rec.finished_at
        return True

    async def commit_steps(self, entries: Deferred) -> bool:
        """Commit several step records (and their side effects) in one batch."""
        self._refuse_if_torn_down()
        return await self._commit_entries(entries, staged=True)

    async def flush_staged(self, *, deferred: bool = True) -> None:
        """Write staged side effects (e.g. attributes set from outside the workflow) now,
        and the deferred step records unless ``deferred`` is false."""
        self._refuse_if_torn_down()
        if deferred and self.deferred:
            await self._commit_entries([], staged=True)
            return
        staged, self.staged = self.staged, {}
        if staged:
            await self.services.committer.commit(list(staged.values()), workflow_id=self.id)

    async def commit_pending(
        self,
        pend: PendingStep,
        ops: list[Op] | None = None,
        conds: list[Expect] | None = None,
        rings: Sequence[str] = (),
    ) -> bool:
        """Record an open step's progress (with any deferred step records). ``False``
        only when one of ``conds`` failed. ``rings``: topics notified with the write
        (see :meth:`~pyweft.engine.replay.commit.Committer.commit`)."""
        self._refuse_if_torn_down()
        journal_key = f"{self._journal_prefix}{pend.step:010d}"
        batch: list[Op] = [Put(key=keys.pending(self.id, pend.step), value=records.encode(pend))]
        if ops:
            batch += ops
        # Tracked before the write: if this step is cancelled while the write is in
        # flight (a race loser), the write may still land, and finish() must delete it.
        self._open_pendings.add(pend.step)
        for branch_pendings in RACE_PENDINGS.get():
            branch_pendings.add(pend.step)
        return await self._commit_entries(
            [], extra=batch, absent=[journal_key], conds=list(conds or ()), rings=rings
        )

    def deferred_batch(self) -> tuple[Deferred, list[Op], list[Expect]]:
        """Take the deferred step records, as the ops and conditions that write them, for
        a batch of the run's own (its end, which deletes every open progress record
        itself). Hand them back with :meth:`restore_deferred` if it is not written."""
        taken, self.deferred = self.deferred, []
        ops: list[Op] = []
        conditions: list[Expect] = []
        for rec, rec_ops, rec_conds in taken:
            key = f"{self._journal_prefix}{rec.step:010d}"
            ops.append(Put(key=key, value=records.encode(rec)))
            ops += rec_ops
            conditions.append(Expect(key=key, value=None))
            conditions += rec_conds
        return taken, ops, conditions

    def restore_deferred(self, taken: Deferred) -> None:
        self.deferred = [*taken, *self.deferred]

    def deferred_written(self, taken: Deferred) -> None:
        """Deferred records taken with :meth:`deferred_batch` were written."""
        for rec, _, _ in taken:
            self._recorded(rec)

    async def _commit_entries(
        self,
        entries: Deferred,
        *,
        staged: bool = False,
        extra: Sequence[Op] = (),
        absent: Sequence[str] = (),
        conds: Sequence[Expect] = (),
        rings: Sequence[str] = (),
    ) -> bool:
        """One fenced batch: the deferred step records, ``entries``, ``extra`` ops, the
        staged side effects if ``staged``; conditioned on every journal key written (and
        those in ``absent``) being absent and on ``conds``.

        ``False`` when a condition of ``conds`` or of an entry failed (nothing written;
        the deferred records and staged effects wait for the next commit);
        :class:`Superseded` when another writer recorded one of these steps.
        """
        taken, self.deferred = self.deferred, []
        entries = [*taken, *entries]
        batch: list[Op] = []
        conditions: list[Expect] = [Expect(key=k, value=None) for k in absent]
        journal_keys = list(absent)
        side_conditions = bool(conds)
        for rec, rec_ops, rec_conds in entries:
            key = f"{self._journal_prefix}{rec.step:010d}"
            journal_keys.append(key)
            batch.append(Put(key=key, value=records.encode(rec)))
            batch += rec_ops
            if rec.step in self._open_pendings:
                batch.append(Delete(key=keys.pending(self.id, rec.step)))
            conditions.append(Expect(key=key, value=None))
            conditions += rec_conds
            side_conditions = side_conditions or bool(rec_conds)
        batch += extra
        conditions += conds
        held_back: dict[str, Op] = {}
        if staged:
            held_back, self.staged = self.staged, {}
            batch += held_back.values()
        try:
            ok = await self.services.committer.commit(
                batch, conditions, workflow_id=self.id, rings=rings
            )
        except BaseException as exc:
            # The batch may or may not be stored (a storage failure, or a cancel that came
            # while it was on its way). If not, the activity need not run again: its
            # outcome is kept here and committed at its step on replay (a deferred one is
            # still stored where it came from). Deferred records go back in line: if the
            # batch did land, writing them again fails on their journal keys and the run
            # is re-driven from what is stored, which holds them.
            self.restore_deferred(taken)
            if isinstance(exc, StorageError):
                for rec, rec_ops, _ in entries:
                    if rec.kind == "activity" and not rec_ops:
                        self.unsaved[rec.step] = rec
            raise
        if not ok:
            self.staged = {**held_back, **self.staged}
            self.restore_deferred(taken)
            if not side_conditions or any(
                [await self.services.storage.get(k) is not None for k in journal_keys]
            ):
                raise Superseded()
            return False
        for rec, _, _ in entries:
            self._recorded(rec)
        return True

    def _recorded(self, rec: StepRecord) -> None:
        self._open_pendings.discard(rec.step)
        # A handler's steps keep their own time (see handler_runs): the workflow's
        # ctx.now() must not move with them, or it would depend on timing.
        if rec.step < keys.HANDLER_STEP_BASE and rec.finished_at > self.logical_now:
            self.logical_now = rec.finished_at
        if self.services.events.active:
            self.emit(
                "step_completed" if rec.ok else "step_failed",
                step=rec.step,
                step_kind=rec.kind,
                name=rec.name,
                attempts=rec.attempts,
            )

    def _refuse_if_torn_down(self) -> None:
        # Once torn down, nothing more is recorded: a cleanup path the workflow takes
        # (a finally block, a handler of the interruption) would break replay.
        if self.torn_down is not None:
            raise self._torn_down_error(self.torn_down.reason)
