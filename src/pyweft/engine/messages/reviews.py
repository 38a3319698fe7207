"""Human review: a workflow step that waits for a person's decision.

``ctx.review`` stores a review record (in the same commit as the step's open
progress, so it is requested exactly once) and waits. ``engine.submit_review``
writes the decision onto that record with a compare-and-swap before it
returns, so a decision is durable when acknowledged and a second decision is
refused. The workflow then records the decision as its step outcome; after a
crash the stored decision is found again and nobody is asked twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from pyweft.durations import parse_duration
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.info import to_datetime
from pyweft.engine.replay.operations import operation
from pyweft.engine.replay.records import ErrorInfo, PendingStep, ReviewRecord, StepRecord
from pyweft.engine.replay.run import Run
from pyweft.engine.replay.services import RunServices
from pyweft.errors import (
    InvalidArgumentError,
    ReviewAlreadyDecidedError,
    ReviewNotFoundError,
    ReviewTimeoutError,
)
from pyweft.storage.base import Delete, Expect, Op, Put

if TYPE_CHECKING:
    from pyweft.engine.replay.residency import Residency

Decision = Literal["approved", "rejected", "needs_changes"]
DECISIONS: tuple[str, ...] = ("approved", "rejected", "needs_changes")
REVIEW_STATUSES: tuple[str, ...] = ("pending", *DECISIONS, "expired", "withdrawn")
_ACTIONS = {"auto-approve": "approved", "auto-reject": "rejected"}

log = logging.getLogger("pyweft.reviews")

MAX_PERSON_BYTES = 200


def check_people(people: object, what: str) -> tuple[str, ...]:
    """Reviewer names as a tuple; a bare string is refused (it would split into letters)."""
    if isinstance(people, str) or not isinstance(people, Iterable):
        raise InvalidArgumentError(
            f"{what} must be a list of names, got {people!r}; write [{people!r}] for one person"
        )
    return tuple(keys.check_text(p, f"{what} entry", MAX_PERSON_BYTES) for p in people)


@dataclass(frozen=True, kw_only=True, slots=True)
class Escalation:
    """After ``after`` (from the request), reassign to ``to`` or decide with ``action``."""

    after: float
    action: Literal["auto-approve", "auto-reject"] | None = None
    to: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Accept durations like "1h" here too, as every other duration option does.
        object.__setattr__(self, "after", parse_duration(self.after, field="escalation after"))
        if self.action is not None and self.action not in _ACTIONS:
            raise InvalidArgumentError(
                f"escalation action must be 'auto-approve' or 'auto-reject', got {self.action!r}"
            )
        object.__setattr__(self, "to", check_people(self.to, "escalation to"))

    @staticmethod
    def parse(value: Escalation | Mapping[str, Any]) -> Escalation:
        if isinstance(value, Escalation):
            return value
        if not isinstance(value, Mapping) or "after" not in value:
            raise InvalidArgumentError(
                "each escalation must be an Escalation or a dict like "
                '{"after": "1h", "action": "auto-approve"} or {"after": "1h", "to": ["lead"]}'
            )
        action = value.get("action")
        if action is not None and action not in _ACTIONS:
            raise InvalidArgumentError(
                f"escalation action must be 'auto-approve' or 'auto-reject', got {action!r}"
            )
        return Escalation(
            after=parse_duration(value["after"], field="escalation after"),
            action=action,
            to=check_people(value.get("to", ()), "escalation to"),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ReviewDecision:
    """What ``ctx.review`` returns."""

    review_id: str
    decision: str
    reviewer: str
    feedback: str | None
    decided_at: datetime

    @property
    def approved(self) -> bool:
        return self.decision == "approved"


@dataclass(frozen=True, kw_only=True, slots=True)
class ReviewInfo:
    """A review as listed by ``engine.list_reviews``."""

    review_id: str
    workflow_id: str
    workflow_type: str
    review_type: str
    status: str
    reviewers: list[str]
    artifact: Any
    created_at: datetime
    deadline: datetime | None
    reviewer: str | None
    feedback: str | None
    decided_at: datetime | None


class _DecisionRecord(msgspec.Struct, array_like=True):
    review_id: str
    decision: str
    reviewer: str
    feedback: str | None
    decided_at: float


def _decision(raw: bytes) -> ReviewDecision:
    d = msgspec.msgpack.decode(raw, type=_DecisionRecord)
    return ReviewDecision(
        review_id=d.review_id,
        decision=d.decision,
        reviewer=d.reviewer,
        feedback=d.feedback,
        decided_at=to_datetime(d.decided_at),
    )


def _timeout(review_id: str) -> ReviewTimeoutError:
    return ReviewTimeoutError(
        f"review {review_id!r} got no decision before its timeout", review_id=review_id
    )


def _with_status(record: ReviewRecord, **changes: Any) -> tuple[ReviewRecord, list[Op]]:
    new = msgspec.structs.replace(record, **changes)
    ops: list[Op] = [Put(key=keys.review(record.review_id), value=records.encode(new))]
    if new.status != record.status:
        ops.append(
            Delete(key=keys.review_index(record.status, record.created_at, record.review_id))
        )
        ops.append(Put(key=keys.review_index(new.status, new.created_at, new.review_id), value=b""))
    return new, ops


@operation
async def review_step(
    run: Run,
    step: int,
    artifact: object,
    review_type: str,
    reviewers: Sequence[str],
    timeout_s: float | None,
    escalation: Sequence[Escalation],
) -> ReviewDecision:
    rec = run.replay(step, "review", review_type)
    if rec is not None:
        if rec.ok and rec.value is not None:
            return _decision(rec.value)
        raise _timeout(rec.error.message if rec.error else "?")
    await run.enter_live()
    clock = run.services.clock
    pend = run.take_pending(step, "review", review_type)
    if pend is None:
        now = clock.now()
        record = ReviewRecord(
            review_id=uuid.uuid4().hex,
            workflow_id=run.id,
            workflow_type=run.definition.name,
            step=step,
            review_type=review_type,
            artifact=run.encode_result(artifact, "review artifact"),
            reviewers=list(reviewers),
            created_at=now,
            deadline=None if timeout_s is None else now + timeout_s,
        )
        pend = PendingStep(
            step=step,
            kind="review",
            name=review_type,
            deadline=record.deadline or 0.0,
            first_started_at=now,
            ref=record.review_id,
        )
        index = keys.review_index("pending", now, record.review_id)
        # Shielded: a race may cancel this branch while the request is being written;
        # the write then finishes anyway and the handler below withdraws it.
        writing = asyncio.ensure_future(
            run.commit_pending(
                pend,
                [
                    Put(key=keys.review(record.review_id), value=records.encode(record)),
                    Put(key=index, value=b""),
                    Put(key=keys.review_of_run(run.id, record.review_id), value=b""),
                ],
            )
        )
        try:
            await asyncio.shield(writing)
        except asyncio.CancelledError:
            if not run.stopping:
                await asyncio.shield(_withdraw_after(run, writing, record.review_id))
            raise
        run.emit("review_requested", step=step, review_id=record.review_id)
    try:
        return await _await_decision(run, step, pend, review_type, escalation)
    except asyncio.CancelledError:
        if not run.stopping:  # lost a race, or the workflow was cancelled: withdraw it
            await asyncio.shield(_withdraw(run, keys.review(pend.ref or "")))
        raise


async def _await_decision(
    run: Run,
    step: int,
    pend: PendingStep,
    review_type: str,
    escalation: Sequence[Escalation],
) -> ReviewDecision:
    services, clock = run.services, run.services.clock
    review_id = pend.ref or ""
    key = keys.review(review_id)
    while True:
        seen = run.wake_seq  # before looking (see waits.park)
        raw = await services.storage.get(key)
        if raw is None:
            raise ReviewNotFoundError(f"review {review_id!r} vanished", review_id=review_id)
        record = records.decode_review(raw)
        if record.status in DECISIONS:
            value = records.encode(
                _DecisionRecord(
                    review_id=review_id,
                    decision=record.status,
                    reviewer=record.reviewer or "",
                    feedback=record.feedback,
                    decided_at=record.decided_at or clock.now(),
                )
            )
            done = StepRecord(
                step=step,
                kind="review",
                name=review_type,
                ok=True,
                started_at=pend.first_started_at,
                finished_at=clock.now(),
                value=value,
            )
            await run.commit_step(done)
            return _decision(value)
        now = clock.now()
        expired = record.status == "expired" or (
            record.deadline is not None and now >= record.deadline
        )
        if expired:
            if record.status != "expired":
                _, ops = _with_status(record, status="expired", decided_at=now)
                if not await services.committer.commit(
                    ops, [Expect(key=key, value=raw)], workflow_id=run.id
                ):
                    continue  # decided meanwhile: look again
            await run.commit_step(
                StepRecord(
                    step=step,
                    kind="review",
                    name=review_type,
                    ok=False,
                    started_at=pend.first_started_at,
                    finished_at=now,
                    error=ErrorInfo(
                        type="ReviewTimeoutError", message=review_id, code="ReviewTimeoutError"
                    ),
                )
            )
            raise _timeout(review_id)
        if await _escalate(run, record, raw, escalation, now):
            continue
        wake = _next_wake(record, escalation)
        await run.live(run.changed(wake, seen))


async def _withdraw_after(run: Run, writing: asyncio.Future[bool], review_id: str) -> None:
    with contextlib.suppress(BaseException):
        await writing
    await _withdraw(run, keys.review(review_id))


async def _withdraw(run: Run, key: str) -> None:
    raw = await run.services.storage.get(key)
    if raw is None:
        return
    record = records.decode_review(raw)
    if record.status != "pending":
        return
    _, ops = _with_status(record, status="withdrawn", decided_at=run.services.clock.now())
    try:
        await run.services.committer.commit(ops, [Expect(key=key, value=raw)], workflow_id=run.id)
    except Exception:
        log.warning("could not withdraw review %s", record.review_id, exc_info=True)


async def _escalate(
    run: Run,
    record: ReviewRecord,
    raw: bytes,
    escalation: Sequence[Escalation],
    now: float,
) -> bool:
    """Apply the most advanced escalation that is due. True if the record changed."""
    level = record.escalation_level
    due = [
        i for i in range(level, len(escalation)) if now >= record.created_at + escalation[i].after
    ]
    if not due:
        return False
    step = escalation[due[-1]]
    if step.action is not None:
        _, ops = _with_status(
            record,
            status=_ACTIONS[step.action],
            reviewer=f"escalation:{step.action}",
            decided_at=now,
        )
    else:
        _, ops = _with_status(record, reviewers=list(step.to), escalation_level=due[-1] + 1)
    await run.services.committer.commit(
        ops, [Expect(key=keys.review(record.review_id), value=raw)], workflow_id=run.id
    )
    return True


def _next_wake(record: ReviewRecord, escalation: Sequence[Escalation]) -> float | None:
    times = [record.created_at + e.after for e in escalation[record.escalation_level :]]
    if record.deadline is not None:
        times.append(record.deadline)
    return min(times) if times else None


# --- the reviewer's side -----------------------------------------------------------------


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


class ReviewDesk:
    """Decisions and listings for people (and the edges that serve them)."""

    def __init__(
        self, services: RunServices, runs: dict[str, Run], residency: Residency | None = None
    ) -> None:
        self._services = services
        self._runs = runs
        self._residency = residency

    async def submit(
        self, review_id: str, decision: str, reviewer: str, feedback: str | None
    ) -> None:
        if decision not in DECISIONS:
            raise InvalidArgumentError(
                f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}"
            )
        if not isinstance(reviewer, str) or not reviewer.strip():
            raise InvalidArgumentError("reviewer must name who decided (a non-empty string)")
        keys.check_text(reviewer, "reviewer", MAX_PERSON_BYTES)
        keys.check_text(review_id, "review_id", keys.MAX_ID_BYTES)
        if feedback is not None and not isinstance(feedback, str):
            raise InvalidArgumentError("feedback must be a string or None")
        if feedback is not None and not _encodable(feedback):
            raise InvalidArgumentError(
                "feedback holds a lone surrogate, which cannot be stored; fix the text's decoding"
            )
        raw = await self._services.storage.get(keys.review(review_id))
        if raw is None:
            raise ReviewNotFoundError(f"no review with id {review_id!r}", review_id=review_id)
        workflow_id = records.decode_review(raw).workflow_id
        try:
            if self._residency is None:
                await self._decide(review_id, decision, reviewer, feedback, [])
            else:
                async with self._residency.sending(workflow_id) as extra:
                    await self._decide(review_id, decision, reviewer, feedback, extra)
        except BaseException:
            # The decision may be stored after all (a lost reply): a run waiting here
            # must look again, or a retried submit (refused as already decided) would
            # leave it waiting for ever.
            run = self._runs.get(workflow_id)
            if run is not None:
                run.notify()
            raise
        run = self._runs.get(workflow_id)
        if run is not None:
            run.emit("review_decided", review_id=review_id, decision=decision, reviewer=reviewer)
            run.notify()
        elif self._residency is not None:
            self._residency.wake(workflow_id)  # evicted: replayed, it finds the decision

    async def _decide(
        self, review_id: str, decision: str, reviewer: str, feedback: str | None, extra: list[Op]
    ) -> None:
        storage, key = self._services.storage, keys.review(review_id)
        while True:
            raw = await storage.get(key)
            if raw is None:
                raise ReviewNotFoundError(f"no review with id {review_id!r}", review_id=review_id)
            record = records.decode_review(raw)
            if record.status != "pending":
                raise ReviewAlreadyDecidedError(
                    f"review {review_id!r} is already {record.status}"
                    + (f" (by {record.reviewer})" if record.reviewer else ""),
                    review_id=review_id,
                    status=record.status,
                )
            _, ops = _with_status(
                record,
                status=decision,
                reviewer=reviewer,
                feedback=feedback,
                decided_at=self._services.clock.now(),
            )
            ops += extra
            held = self._residency is not None and self._residency.holds(record.workflow_id)
            if record.workflow_id not in self._runs and not held:
                ops.append(Put(key=keys.wake(record.workflow_id), value=keys.wake_value()))
            if await self._services.committer.commit(ops, [Expect(key=key, value=raw)]):
                return

    async def list(
        self, status: str | None, workflow_id: str | None, review_type: str | None
    ) -> list[ReviewInfo]:
        if status is not None and status not in REVIEW_STATUSES:
            raise InvalidArgumentError(
                f"unknown review status {status!r}; use one of {', '.join(REVIEW_STATUSES)}"
            )
        statuses: Iterable[str] = REVIEW_STATUSES if status is None else (status,)
        storage, codec = self._services.storage, self._services.codec
        found: list[ReviewInfo] = []
        for s in statuses:
            for key, _ in await storage.scan(f"rvix:{s}:"):
                raw = await storage.get(keys.review(keys.id_from_index_key(key)))
                if raw is None:
                    continue
                r = records.decode_review(raw)
                if workflow_id is not None and r.workflow_id != workflow_id:
                    continue
                if review_type is not None and r.review_type != review_type:
                    continue
                found.append(
                    ReviewInfo(
                        review_id=r.review_id,
                        workflow_id=r.workflow_id,
                        workflow_type=r.workflow_type,
                        review_type=r.review_type,
                        status=r.status,
                        reviewers=list(r.reviewers),
                        artifact=codec.decode(r.artifact),
                        created_at=to_datetime(r.created_at),
                        deadline=None if r.deadline is None else to_datetime(r.deadline),
                        reviewer=r.reviewer,
                        feedback=r.feedback,
                        decided_at=None if r.decided_at is None else to_datetime(r.decided_at),
                    )
                )
        found.sort(key=lambda i: i.created_at)
        return found
