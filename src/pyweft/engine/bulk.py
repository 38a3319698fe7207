"""Bulk operations: one action applied to every run a filter matches, in two steps.

A dry run counts the runs the filter matches, shows a sample and returns a
confirmation token; the commit repeats the same operation and filter with that
token. The token is stored (``bulk:token:``) so any process on the store can
commit it, is single-use (spent by a conditional write, so two commits with one
token apply once; a commit refused for another operation or filter does not spend
it) and lapses after :data:`TOKEN_TTL_S`. Each commit writes an
audit record (``audit:bulk:``) saying who did what to how many runs.

The filter must be *scoped*: a status, workflow type, tag, search attribute or
an id prefix of at least three characters. Time ranges or a parent alone do not
count, so that "everything created this week" cannot be cancelled by accident.

The operations go through the engine's public methods (cancel, signal, fork,
purge), one run at a time, so each keeps that method's guarantees; a run that
finished or moved meanwhile is skipped with the reason, never an error for the
whole batch.
"""

from __future__ import annotations

import hashlib
import secrets
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
    WorkflowNotFoundError,
    WorkflowTerminalError,
)
from pyweft.storage.base import Delete, Expect, Put

if TYPE_CHECKING:
    from pyweft.engine.engine import Engine

Operation = Literal["cancel", "signal", "retry_failed", "delete"]
OPERATIONS: tuple[str, ...] = ("cancel", "signal", "retry_failed", "delete")
TOKEN_TTL_S = 600.0
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


class _Token(msgspec.Struct):
    operation: str
    digest: str
    expires_at: float


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


async def _spend(engine: Engine, operation: str, token: str, digest: str) -> None:
    """Check the token against this commit and spend it (once, whoever commits)."""
    if not isinstance(token, str) or not token.startswith("bulk_"):
        raise BulkOperationConfirmationError(
            "a bulk commit needs the confirmation_token its dry run returned (dry_run=True)"
        )
    key = TOKEN_PREFIX + token
    raw = await engine.storage.get(key)
    why = None
    if raw is None:
        why = "it is unknown or already spent"
    else:
        record = msgspec.msgpack.decode(raw, type=_Token)
        if record.expires_at <= engine.clock.now():
            why = f"it expired ({TOKEN_TTL_S:.0f} s after its dry run)"
        elif record.operation != operation or record.digest != digest:
            why = "it was issued for another operation or filter"
    if why is None and not await engine.storage.conditional_batch(
        [Expect(key=key, value=raw)], [Delete(key=key)]
    ):
        why = "it is already spent"
    if why is not None:
        raise BulkOperationConfirmationError(
            f"confirmation token refused: {why}; run the dry run again and commit with "
            "the token it returns, repeating the same operation and filter"
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
    """Apply ``operation`` to the runs the filter matches now, and audit it."""
    _check_operation(operation, signal)
    scope = check_scope(filters)
    await _spend(engine, operation, confirmation_token, _digest(operation, filters, signal))
    matched = await _matching(engine, filters)
    if operation == "delete":
        _refuse_unfinished(matched)
    applied = 0
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}
    created: list[str] = []
    if operation == "delete":
        applied = await engine.purge(**filters)
        skipped_count = len(matched) - applied  # kept: a parent still awaits them
    else:
        for workflow_id, status in matched:
            try:
                why = await _apply(engine, operation, workflow_id, status, signal, created)
            except (WorkflowTerminalError, WorkflowNotFoundError) as exc:
                why = f"{type(exc).__name__}: it finished or was deleted meanwhile"
            except PyweftError as exc:
                failed[workflow_id] = f"{exc.code}: {exc}"
                continue
            if why is None:
                applied += 1
            elif len(skipped) < _SKIPPED_KEPT:
                skipped[workflow_id] = why
        skipped_count = len(matched) - applied - len(failed)
    audit_id = await _audit(
        engine, operation, scope, len(matched), applied, skipped_count, len(failed), actor
    )
    return BulkResult(
        operation=operation,
        matched=len(matched),
        applied=applied,
        skipped=skipped_count,
        skipped_sample=skipped,
        failed=failed,
        created=created,
        audit_id=audit_id,
    )


async def _apply(
    engine: Engine, operation: str, workflow_id: str, status: str, signal: Any, created: list[str]
) -> str | None:
    """Act on one run; the reason it was skipped, or None when done."""
    if operation == "retry_failed":
        if status != "failed":
            return f"its status is {status!r}, not 'failed'"
        handle = await engine.fork(workflow_id)
        created.append(handle.id)
        return None
    if status in TERMINAL_STATUSES:
        return f"it already ended ({status})"
    if operation == "cancel":
        await engine.cancel(workflow_id)
    else:
        await engine.signal(workflow_id, signal[0], signal[1])
    return None


async def _audit(
    engine: Engine,
    operation: str,
    scope: dict[str, Any],
    matched: int,
    applied: int,
    skipped: int,
    failed: int,
    actor: str | None,
) -> str:
    now = engine.clock.now()
    audit_id = f"{int(now * 1e6):020d}-{secrets.token_hex(4)}"
    record = _Audit(
        operation=operation,
        scope={
            k: v if isinstance(v, str | int | float | bool) else repr(v) for k, v in scope.items()
        },
        matched=matched,
        applied=applied,
        skipped=skipped,
        failed=failed,
        actor=actor,
        at=now,
    )
    await engine.storage.batch(
        [Put(key=AUDIT_PREFIX + keys.enc(audit_id), value=msgspec.msgpack.encode(record))]
    )
    return audit_id


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
