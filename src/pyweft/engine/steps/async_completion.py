"""Async completion: an activity hands its result to the outside world, by token.

The activity returns ``activity_context().complete_async()``. Its step then
parks: the owner writes the step's progress record with the token in ``ref``
(fenced, like every write of the run) and waits. Anyone, from any process,
completes it by token; the token identifies, it does not authorise.

- The token is ``pwa1:{run}:{generation}:{step}:{attempt}``, deterministic for
  one attempt, so replay after a restart parks on the same token.
- Completing writes the outcome at ``wf:{id}:ar:{step}`` in one conditional batch
  that requires the parked record (with this token) and no outcome yet: the
  first completion wins, a second finds the token spent
  (``ActivityTokenNotFoundError``). The payload's size is checked before, so an
  oversized result leaves the token usable.
- The batch also leaves a wake-up marker when this process does not drive the
  run, so its owner looks at once; nobody need drive it: the outcome is stored,
  and replay applies it when it reaches the step (after a crash, before the
  owner noticed, during recovery).
- The owner records the step with the outcome and deletes it in the same batch.
- ``heartbeat_activity(token, details)`` leaves ``wf:{id}:ah:{step}``; the owner
  folds it into the step's heartbeat details and its heartbeat timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from pyweft.codec import payload_size_error
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.info import to_datetime
from pyweft.engine.replay.records import ErrorInfo, PendingStep
from pyweft.engine.replay.run import Run
from pyweft.engine.replay.services import RunServices
from pyweft.errors import ActivityTimeoutError, ActivityTokenNotFoundError, ApplicationError
from pyweft.storage.base import Delete, Expect, Op, Put

if TYPE_CHECKING:
    from pyweft.engine.steps.heartbeats import Heartbeats

TOKEN_PREFIX = "pwa1"


class AsyncPending:
    """What ``activity_context().complete_async()`` returns: return it from the activity."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token

    def __repr__(self) -> str:
        return f"AsyncPending({self.token!r})"


class Outcome(msgspec.Struct, array_like=True, frozen=True):
    """A completion by token, stored until the owner records the step with it."""

    token: str
    ok: bool
    at: float
    value: bytes | None = None
    error: ErrorInfo | None = None
    non_retryable: bool = False


class OutsideBeat(msgspec.Struct, array_like=True, frozen=True):
    token: str
    at: float
    details: bytes | None = None


_outcome_dec = msgspec.msgpack.Decoder(Outcome)
_beat_dec = msgspec.msgpack.Decoder(OutsideBeat)


def decode_outcome(raw: bytes, *, key: str | None = None) -> Outcome:
    try:
        return _outcome_dec.decode(raw)
    except (ValueError, TypeError, OverflowError) as exc:
        raise records.corrupt(key, "async activity outcome", exc) from exc


def decode_beat(raw: bytes, *, key: str | None = None) -> OutsideBeat:
    try:
        return _beat_dec.decode(raw)
    except (ValueError, TypeError, OverflowError) as exc:
        raise records.corrupt(key, "async activity heartbeat", exc) from exc


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingActivity:
    """An activity waiting for completion by token (``engine.pending_activities()``)."""

    token: str
    workflow_id: str
    activity: str
    step: int
    attempt: int
    since: datetime
    heartbeat_details: Any = None


# --- tokens and keys --------------------------------------------------------------


def make_token(workflow_id: str, generation: int, step: int, attempt: int) -> str:
    return f"{TOKEN_PREFIX}:{keys.enc(workflow_id)}:{generation}:{step}:{attempt}"


def is_async_token(ref: str | None) -> bool:
    return ref is not None and ref.startswith(TOKEN_PREFIX + ":")


def parse_token(token: object) -> tuple[str, int, int, int]:
    """``(workflow_id, generation, step, attempt)``; not found when it is no token of ours."""
    if isinstance(token, str):
        parts = token.split(":")
        if len(parts) == 5 and parts[0] == TOKEN_PREFIX and all(p.isdigit() for p in parts[2:]):
            try:
                workflow_id = keys.dec(parts[1])
            except Exception:
                workflow_id = ""
            if workflow_id:
                return workflow_id, int(parts[2]), int(parts[3]), int(parts[4])
    raise not_found(str(token), "it is not an activity token (they look like pwa1:...)")


def not_found(token: str, why: str) -> ActivityTokenNotFoundError:
    return ActivityTokenNotFoundError(
        f"no activity waits for token {token!r}: {why}. A token is single-use and lives "
        "only while its attempt waits; list the waiting ones with "
        "engine.pending_activities() or `pyweft activities list`.",
        token=token,
    )


def outcome_key(workflow_id: str, step: int) -> str:
    return f"{keys.wf(workflow_id)}:ar:{step:010d}"


def beat_key(workflow_id: str, step: int) -> str:
    return f"{keys.wf(workflow_id)}:ah:{step:010d}"


# --- the owner's side -----------------------------------------------------------------


async def park(run: Run, base: PendingStep, token: str, *, announce: bool) -> PendingStep:
    """Record that the step waits for ``token`` (fenced), and say so once."""
    parked = msgspec.structs.replace(base, ref=token)
    await run.commit_pending(parked)
    if announce:
        run.emit("activity_async_pending", step=parked.step, token=token, name=parked.name)
    return parked


async def wait_outcome(
    run: Run,
    step: int,
    token: str,
    beats: Heartbeats,
    deadline: float | None,
    deadline_kind: str,
    heartbeat_s: float | None,
    name: str,
) -> bytes | None:
    """Wait for the outcome of ``token``: the result payload, or raise its failure.

    The attempt's deadline and heartbeat timeout keep running while it waits.
    """
    storage = run.services.storage
    clock = run.services.clock
    key, hb_key = outcome_key(run.id, step), beat_key(run.id, step)
    seen_beat: float | None = None
    prefix = keys.wf(run.id) + ":a"  # ``:ah:`` and ``:ar:`` of every step: one read
    while True:
        since = run.wake_seq
        found = dict(await storage.scan(prefix, start=hb_key, end=key + "\x00"))
        raw = found.get(key)
        if raw is not None:
            outcome = decode_outcome(raw, key=key)
            if outcome.token == token:
                run.staged[key] = Delete(key=key)  # removed with the step's record
                if outcome.ok:
                    return outcome.value
                err = outcome.error or ErrorInfo(type="ApplicationError", message="failed")
                raise ApplicationError(
                    err.message, type=err.type, non_retryable=outcome.non_retryable
                )
        beat_raw = found.get(hb_key)
        if beat_raw is not None:
            beat = decode_beat(beat_raw, key=hb_key)
            if beat.token == token and beat.at != seen_beat:
                seen_beat = beat.at
                run.staged[hb_key] = Delete(key=hb_key)
                beats.beat_from_outside(beat.details, beat.at)
        now = clock.now()
        if deadline is not None and now >= deadline:
            limit = "timeout" if deadline_kind == "attempt" else "schedule_to_close budget"
            raise ActivityTimeoutError(
                f"activity {name!r} was not completed within its {limit}", kind=deadline_kind
            )
        wake_at = deadline
        if heartbeat_s is not None:
            silent_until = beats.last_beat + heartbeat_s
            if now >= silent_until:
                raise ActivityTimeoutError(
                    f"activity {name!r} waiting for completion got no heartbeat for "
                    f"{heartbeat_s:.3f}s (its heartbeat_timeout)",
                    kind="heartbeat",
                )
            wake_at = silent_until if wake_at is None else min(wake_at, silent_until)
        await run.changed(wake_at, since=since)


# --- anyone's side ----------------------------------------------------------------------


class CompletionHost(Protocol):
    """What completing by token needs from the engine."""

    runs: dict[str, Run]
    residency: Any

    def services_or_raise(self) -> RunServices: ...


async def complete(host: CompletionHost, token: str, result: Any) -> None:
    """``engine.complete_activity``: store ``result`` as the outcome of ``token``."""
    services = host.services_or_raise()
    parse_token(token)
    payload = services.codec.encode(result)
    if len(payload) > services.max_payload_bytes:  # before the token is spent
        raise payload_size_error(
            len(payload), services.max_payload_bytes, what="async activity result"
        )
    outcome = Outcome(token=token, ok=True, at=services.clock.now(), value=payload)
    await _resolve(host, token, records.encode(outcome))


async def fail(host: CompletionHost, token: str, error: BaseException | str) -> None:
    """``engine.fail_activity``: fail the attempt of ``token`` (retried per its policy)."""
    services = host.services_or_raise()
    parse_token(token)
    if isinstance(error, str):
        info = ErrorInfo(type="ApplicationError", message=error)
        final = False
    else:
        info = records.error_info(error)
        if isinstance(error, ApplicationError) and error.type:
            info = ErrorInfo(type=error.type, message=info.message, code=info.code)
        final = getattr(error, "non_retryable", False) is True
    if len(info.message.encode()) > services.max_payload_bytes:
        raise payload_size_error(
            len(info.message.encode()), services.max_payload_bytes, what="error message"
        )
    outcome = Outcome(
        token=token, ok=False, at=services.clock.now(), error=info, non_retryable=final
    )
    await _resolve(host, token, records.encode(outcome))


async def heartbeat(host: CompletionHost, token: str, details: Any = None) -> None:
    """``engine.heartbeat_activity``: the outside worker is alive (and how far it got)."""
    services = host.services_or_raise()
    workflow_id, _, step, _ = parse_token(token)
    payload = None if details is None else services.codec.encode(details)
    if payload is not None and len(payload) > services.max_payload_bytes:
        raise payload_size_error(len(payload), services.max_payload_bytes, what="heartbeat details")
    await _parked(services, token)  # refuses unknown tokens and finished attempts
    beat = OutsideBeat(token=token, at=services.clock.now(), details=payload)
    ops: list[Op] = [Put(key=beat_key(workflow_id, step), value=records.encode(beat))]
    await _write_and_wake(host, services, workflow_id, ops, [])


async def _parked(services: RunServices, token: str) -> bytes:
    """The raw progress record parked on ``token``; not found unless it waits now."""
    workflow_id, _, step, _ = parse_token(token)
    storage = services.storage
    pending_key = keys.pending(workflow_id, step)
    raw = await storage.get(pending_key)
    if raw is None:
        raise not_found(token, "nothing waits for it (spent, or its run moved on)")
    pend = records.decode_pending(raw, key=pending_key)
    if pend.ref != token:
        raise not_found(token, "its step waits for another attempt's token, or none")
    return raw


_MAX_RESOLVE_TRIES = 20


async def _resolve(host: CompletionHost, token: str, outcome: bytes) -> None:
    services = host.services_or_raise()
    workflow_id, _, step, _ = parse_token(token)
    key = outcome_key(workflow_id, step)
    for _ in range(_MAX_RESOLVE_TRIES):
        raw = await _parked(services, token)
        ops: list[Op] = [Put(key=key, value=outcome)]
        conds = [
            Expect(key=keys.pending(workflow_id, step), value=raw),
            Expect(key=key, value=None),
        ]
        if await _write_and_wake(host, services, workflow_id, ops, conds):
            return
        if await services.storage.get(key) is not None:
            raise not_found(token, "it was already completed or failed")
        # The parked record changed under us (its heartbeat details were written):
        # look again; _parked refuses the token if the step moved on.
    raise not_found(token, "its step kept changing while it was being completed")


async def _write_and_wake(
    host: CompletionHost,
    services: RunServices,
    workflow_id: str,
    ops: list[Op],
    conds: list[Expect],
) -> bool:
    residency = host.residency
    run = host.runs.get(workflow_id)
    held = run is None and residency is not None and residency.holds(workflow_id)
    if run is None and not held:
        ops = [*ops, Put(key=keys.wake(workflow_id), value=keys.wake_value())]
    if held:
        async with residency.sending(workflow_id) as extra:
            ok = await services.committer.commit([*ops, *extra], conds)
            if ok:
                residency.wake(workflow_id, unmarked=bool(extra))
            return bool(ok)
    ok = await services.committer.commit(ops, conds)
    if ok and run is not None:
        run.notify()
    return bool(ok)


async def pending(
    host: CompletionHost, workflow_id: str | None, run_ids: list[str], limit: int
) -> list[PendingActivity]:
    """Activities waiting for completion by token, of one run or of ``run_ids``."""
    services = host.services_or_raise()
    out: list[PendingActivity] = []
    for wid in [workflow_id] if workflow_id is not None else run_ids:
        for key, raw in await services.storage.scan(keys.pending_prefix(wid)):
            pend = records.decode_pending(raw, key=key)
            if pend.kind != "activity" or not is_async_token(pend.ref):
                continue
            assert pend.ref is not None
            out.append(
                PendingActivity(
                    token=pend.ref,
                    workflow_id=wid,
                    activity=pend.name,
                    step=pend.step,
                    attempt=pend.attempt + 1,
                    since=to_datetime(pend.first_started_at),
                    heartbeat_details=None
                    if pend.heartbeat is None
                    else services.codec.decode(pend.heartbeat),
                )
            )
            if len(out) >= limit:
                return out
    return out
