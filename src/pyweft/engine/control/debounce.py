"""``engine.debounce``: calls within a quiet period collapse into one run.

The first call for a key creates a ``pending`` run that starts ``period`` later,
and records it under ``dbn:{key}``. A later call, while that run is still
pending, rewrites the run's arguments with its own and moves its start to
``period`` after itself, but never past ``max_wait`` after the first call. A call
after the run has started begins a new pending run for the key.

Every call is one compare-and-swap on both the key's record and the pending
run's state, so concurrent callers in any number of processes serialise on the
store: exactly one pending run per key at a time, and it starts with the
arguments of the call that committed last. The start time only ever moves later,
so a start timer armed for an earlier time (in this engine or another) fires
early, finds the run not due yet and re-arms (``EngineCore._begin_pending``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from pyweft.codec import encode_args, payload_size_error
from pyweft.engine.control import creation
from pyweft.engine.control.core import EngineCore
from pyweft.engine.messages.signals import SignalSender
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.driving import status_change_ops
from pyweft.errors import InvalidArgumentError
from pyweft.storage.base import Expect, Op, Put

_ATTEMPTS = 100


class DebounceRecord(msgspec.Struct, array_like=True):
    workflow_id: str
    first_at: float
    max_wait_s: float | None = None


_dec = msgspec.msgpack.Decoder(DebounceRecord)
_enc = msgspec.msgpack.Encoder()


def record_key(key: str) -> str:
    return "dbn:" + keys.enc(key)


def check_period(period_s: float | None, max_wait_s: float | None) -> None:
    if period_s is None or period_s <= 0:
        raise InvalidArgumentError(f"period must be a positive duration, got {period_s!r}")
    if max_wait_s is not None and max_wait_s < period_s:
        raise InvalidArgumentError(
            f"max_wait ({max_wait_s}s) must be at least the period ({period_s}s), or None"
        )


async def debounce(
    core: EngineCore,
    signals: SignalSender,
    key: str,
    wf: Callable[..., Any] | str,
    args: tuple[Any, ...],
    *,
    period_s: float,
    max_wait_s: float | None,
) -> tuple[str, bool]:
    """``(workflow id, True if this call created the pending run)``; see the module doc."""
    keys.check_text(key, "debounce key", keys.MAX_ID_BYTES)
    check_period(period_s, max_wait_s)
    definition = core.definition(wf)
    definition.check_arguments(args)
    payload = encode_args(core.codec, args)
    if len(payload) > core.max_payload_bytes:
        raise payload_size_error(
            len(payload), core.max_payload_bytes, what=f"arguments of {definition.name!r}"
        )
    dkey = record_key(key)
    storage = core.storage
    for _ in range(_ATTEMPTS):
        now = core.clock.now()
        rec_raw = await storage.get(dkey)
        if rec_raw is not None:
            rec = _dec.decode(rec_raw)
            state_raw = await storage.get(keys.wf(rec.workflow_id))
            state = None if state_raw is None else records.decode_state(state_raw)
            if state is not None and state.status == "pending":
                if state.type != definition.name:
                    raise InvalidArgumentError(
                        f"debounce key {key!r} is collecting calls of workflow {state.type!r}, "
                        f"not {definition.name!r}; use another key per workflow"
                    )
                start = now + period_s
                if rec.max_wait_s is not None:
                    start = min(start, rec.first_at + rec.max_wait_s)
                start = max(start, state.start_at or start)  # never earlier than armed
                new = msgspec.structs.replace(state, args=payload, start_at=start, updated_at=now)
                new_raw = records.encode(new)
                ops: list[Op] = [Put(key=keys.wf(state.id), value=new_raw)]
                ops += status_change_ops(state, new)
                conds = [
                    Expect(key=dkey, value=rec_raw),
                    Expect(key=keys.wf(state.id), value=state_raw),
                ]
                if await core.committer.commit(ops, conds):
                    if core.drives and state.id in core.pending_timers:
                        core.arm_pending(new)  # re-armed exactly, rather than early
                    return state.id, False
                continue  # another caller (or the start) got there first: look again
        workflow_id = str(uuid.uuid4())
        fresh = DebounceRecord(workflow_id=workflow_id, first_at=now, max_wait_s=max_wait_s)
        _, created = await creation.create(
            core,
            signals,
            definition.name,
            args,
            id=workflow_id,
            on_conflict="use_existing",
            start_delay=period_s,
            encoded_args=payload,
            extra=([Put(key=dkey, value=_enc.encode(fresh))], [Expect(key=dkey, value=rec_raw)]),
        )
        if created:
            return workflow_id, True
    raise RuntimeError(f"debounce {key!r}: too much contention on the key; try again")
