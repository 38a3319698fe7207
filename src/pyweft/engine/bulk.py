"""Bulk operations: one action applied to every run a filter matches, in two steps.

A dry run counts the runs the filter matches, shows a sample and returns a
confirmation token; the commit repeats the same operation and filter with that
token. The token is stored (``bulk:token:``) so any process on the store can
commit it, and lapses unused after :data:`TOKEN_TTL_S`.

A commit *claims* the token by a conditional write that also stores the runs it
matched and the audit id; that write is the spend, so two commits racing with one
token apply once (a commit refused for another operation or filter spends
nothing). A commit cut off by a storage error, or one that reports failed runs,
leaves the claim resumable: committing again with the same token acts on the runs
matched at the claim that are not known to be done (after failed runs, only those;
after an exception, all of them), and each per-run operation is idempotent for that claim
(a signal carries a signal id derived from the audit id, a retry forks into an id
derived from it, cancel and purge repeat harmlessly), so no run is acted on twice
and the counts stay exact. A claim whose commit died without saying so (a crash,
or the store still down) is resumable after :data:`CLAIM_LEASE_S`. The audit
record (``audit:bulk:``, one per claim, rewritten by each attempt) says who did
what to how many runs; the attempt that finishes writes it and deletes the token
in one batch.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from pyweft.engine.replay import keys
from pyweft.engine.replay.records import TERMINAL_STATUSES
from pyweft.errors import (
    BulkDeleteRequiresTerminalWorkflowsError,
    BulkOperationConfirmationError,
    BulkScopeError,
    InvalidArgumentError,
    PyweftError,
    WorkflowAlreadyExistsError,
    WorkflowNotFoundError,
    WorkflowTerminalError,
)
from pyweft.storage.base import Delete, Expect, Op, Put

if TYPE_CHECKING:
    from pyweft.engine.engine import Engine

Operation = Literal["cancel", "signal", "retry_failed", "delete"]
OPERATIONS: tuple[str, ...] = ("cancel", "signal", "retry_failed", "delete")
TOKEN_TTL_S = 600.0
CLAIM_LEASE_S = 60.0
"""How long a claimed token is refused to other commits unless its commit said it
stopped; then another commit may resume it (safe even if the first still runs)."""
SAMPLE_SIZE = 20
MIN_ID_PREFIX = 3
TOKEN_PREFIX = "bulk:token:"
AUDIT_PREFIX = "audit:bulk:"
_PAGE = 500
_SKIPPED_KEPT = 100  # skipped runs listed in a result (all are counted)


@dataclass(frozen=True)
class BulkPreview:
    """What a commit with ``confirmation_token`` would act on, as of the dry run."""

    operation: str
    matched: int
    sample: list[str]
    scope: dict[str, Any]
    confirmation_token: str
    expires_at: datetime


@dataclass(frozen=True)
class BulkResult:
    """What a commit did: ``applied`` runs acted on, ``skipped`` ones left (finished or
    moved meanwhile; the first of them listed with why), ``failed`` ones with the error."""

    operation: str
    matched: int
    applied: int
    skipped: int
    skipped_sample: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)  # retry_failed: the new runs' ids
    audit_id: str = ""


_FORK_NAMESPACE = uuid.UUID("5b0c43f4-3a51-4e8e-9a35-8f1d0c9b7e21")


class _Token(msgspec.Struct):
    operation: str
    digest: str
    expires_at: float
    # Set by the commit that claims the token ("issued" until then):
    state: str = "issued"  # "committing" while a commit runs, "interrupted" once it stopped
    audit_id: str = ""
    claimed_at: float = 0.0
    attempt: str = ""  # which commit holds the claim
    matched: list[tuple[str, str]] = []  # (id, status) as the claiming commit matched them
    # Left by an attempt that finished with failed runs: only those are acted on again,
    # and what the earlier attempts did is carried over (None: act on every claimed run).
    pending: list[str] | None = None
    applied: int = 0
    skipped_sample: dict[str, str] = {}
    created: list[str] = []


class _Audit(msgspec.Struct):
    operation: str
    scope: dict[str, Any]
    matched: int
    applied: int
    skipped: int
    failed: int
    actor: str | None
    at: float


def check_scope(filters: Mapping[str, Any]) -> dict[str, Any]:
    """The filters that scope the operation; raises :class:`BulkScopeError` if none does."""
    scope = {
        name: filters[name]
        for name in ("status", "workflow_type", "tags", "attributes")
        if filters.get(name)
    }
    prefix = filters.get("id_prefix")
    if isinstance(prefix, str) and len(prefix) >= MIN_ID_PREFIX:
        scope["id_prefix"] = prefix
    if not scope:
        raise BulkScopeError(
            "a bulk operation needs a scoped filter: status, workflow_type, tags, "
            f"attributes, or an id_prefix of at least {MIN_ID_PREFIX} characters (time "
            "ranges or a parent alone do not narrow it enough)"
        )
    return scope


def _digest(operation: str, filters: Mapping[str, Any], signal: Any) -> str:
    canon = msgspec.json.encode(
        [operation, sorted(filters.items()), signal], enc_hook=repr, order="deterministic"
    )
    return hashlib.sha256(canon).hexdigest()


def _check_operation(operation: str, signal: Any) -> None:
    if operation not in OPERATIONS:
        raise InvalidArgumentError(
            f"unknown bulk operation {operation!r}; use one of {', '.join(OPERATIONS)}"
        )
    if operation == "signal":
        if not (isinstance(signal, tuple | list) and len(signal) == 2):
            raise InvalidArgumentError(
                "a bulk signal needs signal=(name, payload), e.g. signal=('pause', None)"
            )
        from pyweft.engine.messages.signals import check_name

        check_name(signal[0], "signal")
    elif signal is not None:
        raise InvalidArgumentError(f"signal= applies to the 'signal' operation, not {operation!r}")


async def _matching(engine: Engine, filters: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(id, status) of every run the filter matches, newest first."""
    out: list[tuple[str, str]] = []
    cursor: str | None = None
    while True:
        page = await engine.list(**filters, limit=_PAGE, cursor=cursor)
        out += [(info.id, info.status) for info in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return out


def _refuse_unfinished(matched: list[tuple[str, str]]) -> None:
    running = [i for i, status in matched if status not in TERMINAL_STATUSES]
    if running:
        raise BulkDeleteRequiresTerminalWorkflowsError(
            f"the filter matches {len(running)} run(s) that have not finished (e.g. "
            f"{running[0]!r}); only finished runs can be deleted: add status='completed', "
            "'failed' or 'cancelled' to the filter",
            running=running[:SAMPLE_SIZE],
        )


async def preview(
    engine: Engine, operation: str, filters: dict[str, Any], signal: Any = None
) -> BulkPreview:
    """The dry run: validate, count, sample, and store a confirmation token."""
    _check_operation(operation, signal)
    scope = check_scope(filters)
    matched = await _matching(engine, filters)
    if operation == "delete":
        _refuse_unfinished(matched)
    token = "bulk_" + secrets.token_urlsafe(18)
    expires = engine.clock.now() + TOKEN_TTL_S
    record = _Token(
        operation=operation, digest=_digest(operation, filters, signal), expires_at=expires
    )
    await engine.storage.batch(
        [Put(key=TOKEN_PREFIX + token, value=msgspec.msgpack.encode(record))]
    )
    return BulkPreview(
        operation=operation,
        matched=len(matched),
        sample=[i for i, _ in matched[:SAMPLE_SIZE]],
        scope=scope,
        confirmation_token=token,
        expires_at=datetime.fromtimestamp(expires, UTC),
    )


def _refused(why: str) -> BulkOperationConfirmationError:
    return BulkOperationConfirmationError(
        f"confirmation token refused: {why}; run the dry run again and commit with "
        "the token it returns, repeating the same operation and filter"
    )


def _in_progress(record: _Token, now: float) -> BulkOperationConfirmationError:
    wait = max(0.0, record.claimed_at + CLAIM_LEASE_S - now)
    return BulkOperationConfirmationError(
        f"confirmation token refused: a commit with it is in progress (audit id "
        f"{record.audit_id}); its counts appear in bulk_audit() when it ends. If that "
        f"commit was cut off, commit again with this same token in {wait:.0f} s (not "
        "with a new dry run's token, which would act again on the runs it already did)"
    )


async def _claim(
    engine: Engine, operation: str, token: str, digest: str, filters: dict[str, Any]
) -> tuple[str, bytes, _Token]:
    """Spend the token for this commit, or take over a claim left by one that stopped.

    Returns the token's key, the claim as stored, and the claim.
    """
    if not isinstance(token, str) or not token.startswith("bulk_"):
        raise BulkOperationConfirmationError(
            "a bulk commit needs the confirmation_token its dry run returned (dry_run=True)"
        )
    key = TOKEN_PREFIX + token
    raw = await engine.storage.get(key)
    if raw is None:
        raise _refused("it is unknown or already spent (bulk_audit() lists finished commits)")
    record = msgspec.msgpack.decode(raw, type=_Token)
    if record.operation != operation or record.digest != digest:
        raise _refused("it was issued for another operation or filter")
    now = engine.clock.now()
    attempt = secrets.token_hex(8)
    if record.state == "issued":
        if record.expires_at <= now:
            raise _refused(f"it expired ({TOKEN_TTL_S:.0f} s after its dry run)")
        matched = await _matching(engine, filters)
        if operation == "delete":
            _refuse_unfinished(matched)
        audit_id = f"{int(now * 1e6):020d}-{secrets.token_hex(4)}"
        claim = msgspec.structs.replace(
            record,
            state="committing",
            audit_id=audit_id,
            claimed_at=now,
            attempt=attempt,
            matched=matched,
        )
    elif record.state == "interrupted" or record.claimed_at + CLAIM_LEASE_S <= now:
        claim = msgspec.structs.replace(record, state="committing", claimed_at=now, attempt=attempt)
    else:
        raise _in_progress(record, now)
    claimed = msgspec.msgpack.encode(claim)
    try:
        won = await engine.storage.conditional_batch(
            [Expect(key=key, value=raw)], [Put(key=key, value=claimed)]
        )
    except BaseException:
        await _release(engine, key, claimed)  # the claim may have landed (a lost reply)
        raise
    if not won:  # another commit claimed it first
        current = await engine.storage.get(key)
        if current is None:
            raise _refused("it is already spent")
        raise _in_progress(msgspec.msgpack.decode(current, type=_Token), now)
    return key, claimed, claim


async def _release(engine: Engine, key: str, claimed: bytes) -> None:
    """Mark a claim as stopped so the next commit with the token resumes it at once.

    Best effort: if this write fails too, the claim lapses after CLAIM_LEASE_S.
    """
    stopped = msgspec.structs.replace(
        msgspec.msgpack.decode(claimed, type=_Token), state="interrupted"
    )
    with contextlib.suppress(Exception):
        await engine.storage.conditional_batch(
            [Expect(key=key, value=claimed)],
            [Put(key=key, value=msgspec.msgpack.encode(stopped))],
        )


async def commit(
    engine: Engine,
    operation: str,
    filters: dict[str, Any],
    *,
    confirmation_token: str,
    signal: Any = None,
    actor: str | None = None,
) -> BulkResult:
    """Apply ``operation`` to the runs the filter matches now, and audit it.

    With a token whose earlier commit stopped (a storage error, failed runs), act
    again on the runs that commit matched; each is acted on once in all.
    """
    _check_operation(operation, signal)
    scope = check_scope(filters)
    digest = _digest(operation, filters, signal)
    key, claimed, claim = await _claim(engine, operation, confirmation_token, digest, filters)
    try:
        result = await _carry_out(engine, operation, filters, signal, claim)
        # The audit and the token's fate in one batch: finished, the token is gone;
        # with failed runs, the claim stays for a commit with the same token to finish.
        if result.failed:
            stopped = msgspec.structs.replace(
                claim,
                state="interrupted",
                pending=list(result.failed),
                applied=result.applied,
                skipped_sample=result.skipped_sample,
                created=result.created,
            )
            token_op: Op = Put(key=key, value=msgspec.msgpack.encode(stopped))
        else:
            token_op = Delete(key=key)
        await engine.storage.batch([_audit(engine, scope, result, actor), token_op])
    except BaseException:
        await _release(engine, key, claimed)
        raise
    return result


async def _carry_out(
    engine: Engine, operation: str, filters: dict[str, Any], signal: Any, claim: _Token
) -> BulkResult:
    matched = claim.matched
    if operation == "delete":
        await engine.purge(**filters)
        # Counted from the store, not from purge's return, so that a resumed commit
        # also counts the runs an earlier attempt deleted.
        remaining = {i for i, _ in await _matching(engine, filters)}
        kept = [i for i, _ in matched if i in remaining]
        return BulkResult(
            operation=operation,
            matched=len(matched),
            applied=len(matched) - len(kept),
            skipped=len(kept),
            skipped_sample={
                i: "still stored: a parent that has not recorded it yet keeps it"
                for i in kept[:_SKIPPED_KEPT]
            },
            audit_id=claim.audit_id,
        )
    todo = matched
    if claim.pending is not None:
        pending = set(claim.pending)
        todo = [(i, status) for i, status in matched if i in pending]
    applied = claim.applied
    skipped = dict(claim.skipped_sample)
    failed: dict[str, str] = {}
    created = list(claim.created)
    for workflow_id, status in todo:
        try:
            why = await _apply(engine, operation, workflow_id, status, signal, created, claim)
        except (WorkflowTerminalError, WorkflowNotFoundError) as exc:
            why = f"{type(exc).__name__}: it finished or was deleted meanwhile"
        except PyweftError as exc:
            failed[workflow_id] = (
                f"{exc.code}: {exc} (commit again with the same token to retry it)"
            )
            continue
        if why is None:
            applied += 1
        elif len(skipped) < _SKIPPED_KEPT:
            skipped[workflow_id] = why
    return BulkResult(
        operation=operation,
        matched=len(matched),
        applied=applied,
        skipped=len(matched) - applied - len(failed),
        skipped_sample=skipped,
        failed=failed,
        created=created,
        audit_id=claim.audit_id,
    )


async def _apply(
    engine: Engine,
    operation: str,
    workflow_id: str,
    status: str,
    signal: Any,
    created: list[str],
    claim: _Token,
) -> str | None:
    """Act on one run, idempotently for this claim; the reason it was skipped, or None."""
    if operation == "retry_failed":
        if status != "failed":
            return f"its status is {status!r}, not 'failed'"
        new_id = str(uuid.uuid5(_FORK_NAMESPACE, f"{claim.audit_id}/{workflow_id}"))
        with contextlib.suppress(WorkflowAlreadyExistsError):  # forked by an earlier attempt
            await engine.fork(workflow_id, id=new_id)
        created.append(new_id)
        return None
    if status in TERMINAL_STATUSES:
        return f"it already ended ({status})"
    if operation == "cancel":
        await engine.cancel(workflow_id)  # asking again is a no-op
    else:
        # A resend with the same id is a no-op, even if the run has ended since.
        await engine.signal(workflow_id, signal[0], signal[1], signal_id=f"bulk:{claim.audit_id}")
    return None


def _audit(engine: Engine, scope: dict[str, Any], result: BulkResult, actor: str | None) -> Put:
    record = _Audit(
        operation=result.operation,
        scope={
            k: v if isinstance(v, str | int | float | bool) else repr(v) for k, v in scope.items()
        },
        matched=result.matched,
        applied=result.applied,
        skipped=result.skipped,
        failed=len(result.failed),
        actor=actor,
        at=engine.clock.now(),
    )
    return Put(key=AUDIT_PREFIX + keys.enc(result.audit_id), value=msgspec.msgpack.encode(record))


async def audit_log(engine: Engine, limit: int = 50) -> list[dict[str, Any]]:
    """The newest bulk audit records first."""
    rows = await engine.storage.scan(AUDIT_PREFIX, limit=limit, reverse=True)
    out = []
    for key, raw in rows:
        record = msgspec.msgpack.decode(raw, type=_Audit)
        out.append(
            {
                "audit_id": keys.dec(key[len(AUDIT_PREFIX) :]),
                **msgspec.structs.asdict(record),
                "at": datetime.fromtimestamp(record.at, UTC),
            }
        )
    return out
