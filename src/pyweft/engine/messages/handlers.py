"""Signal handlers: ``ctx.on_signal(name, handler)`` applies each ``name`` signal to
workflow state, in arrival order, exactly once.

A handler is a plain function: it runs between steps and changes what the
workflow keeps in memory (counters, lists, flags that ``ctx.wait_until``
reads). The run applies buffered signals at step boundaries, in its own task:
when a step starts and whenever a parked wait is woken. A batch of signals is
applied in memory first, then ONE commit deletes them from the buffer (each
deletion conditioned on the bytes read) and records each application under the
boundary step, in the same log as updates applied by ``on_update`` handlers,
so replay calls the handlers again at the same points, in the same order, and
rebuilds the same state. If that commit fails, memory is ahead of the store:
the run is torn down and replayed from what was stored.

A handler that raises fails the run: its signal counts as applied (it is not
delivered again), and replay fails the run at the same point.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyweft.codec import call_types
from pyweft.engine.messages.signals import check_name, mixing_error
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.drift import DriftCall
from pyweft.engine.replay.memory_ahead import commit_ahead
from pyweft.engine.replay.records import AppliedUpdate, SignalRecord
from pyweft.engine.replay.run import Run, RunEnding, Superseded
from pyweft.errors import ApplicationError, DefinitionError, WorkflowUsageError
from pyweft.storage.base import Delete, Expect, Op, Put

log = logging.getLogger("pyweft.handlers")

BATCH = 512
"""Signals applied per commit at most: one write for a burst, bounded memory."""

SIGNAL = "signal"


@dataclass(frozen=True, slots=True)
class SignalHandler:
    fn: Callable[..., Any]
    takes_payload: bool
    payload_type: object


def make_signal_handler(name: str, fn: object) -> SignalHandler:
    if not callable(fn):
        raise DefinitionError(f"the handler for signal {name!r} must be a function, got {fn!r}")
    if inspect.iscoroutinefunction(fn):
        raise DefinitionError(
            f"the handler for signal {name!r} must be a plain (non-async) function: it runs "
            "between steps and may only change workflow state. To run activities for a "
            "message, use an update handler (ctx.on_update) or a wait_for_signal loop."
        )
    types, _, varargs = call_types(fn, skip_first=False)
    return SignalHandler(
        fn=fn,
        takes_payload=bool(types) or varargs,
        payload_type=types[0] if types else Any,
    )


def register(run: Run, name: str, fn: object) -> None:
    """``ctx.on_signal``: from now on ``name`` signals go to ``fn``."""
    check_name(name, "signal")
    if run.signal_waits.get(name):
        raise WorkflowUsageError(mixing_error(name))
    run.signal_handlers[name] = make_signal_handler(name, fn)
    run.signals_dirty = True  # signals buffered before it was registered are its too
    run.signal_cache.pop(name, None)


def _call(run: Run, handler: SignalHandler, payload: bytes) -> None:
    if handler.takes_payload:
        handler.fn(run.services.codec.decode(payload, handler.payload_type))
    else:
        handler.fn()


def _failed(run: Run, name: str, exc: Exception) -> RunEnding:
    error = ApplicationError(
        f"the handler of signal {name!r} raised {type(exc).__name__}: {exc}",
        type=type(exc).__name__,
        non_retryable=True,
    )
    run.fatal = error
    return RunEnding(error)


def reapply(run: Run, applied: AppliedUpdate) -> None:
    """Replay: apply a recorded signal again with the handler registered now."""
    handler = run.signal_handlers.get(applied.name)
    if handler is None:
        run.nondeterminism(
            applied.boundary,
            DriftCall(kind="signal", name=applied.name, detail="applied by a handler"),
            DriftCall(kind=None, name=None, detail="no handler registered for it at that point"),
            "handler_mismatch",
        )
    try:
        _call(run, handler, applied.payload or b"")
    except Exception as exc:  # it failed the first time too: the run fails here again
        raise _failed(run, applied.name, exc) from exc


async def _buffered(run: Run) -> list[tuple[str, bytes, SignalRecord]]:
    """The next signals to apply, oldest first, across every handled name."""
    storage = run.services.storage
    found: list[tuple[str, bytes, SignalRecord]] = []
    cap: int | None = None  # a name with more buffered than one batch: stop at its last
    for name in list(run.signal_handlers):
        rows = await storage.scan(keys.signal_prefix(run.id, name), limit=BATCH)
        decoded = [(key, raw, records.decode_signal(raw, key=key)) for key, raw in rows]
        found += decoded
        if len(rows) == BATCH:
            run.signals_dirty = True
            last = decoded[-1][2].seq
            cap = last if cap is None else min(cap, last)
    found.sort(key=lambda item: item[2].seq)
    if cap is not None:
        found = [item for item in found if item[2].seq <= cap]
    if len(found) > BATCH:
        run.signals_dirty = True  # several names together hold more: the rest next round
    return found[:BATCH]


async def apply_signals(run: Run) -> None:
    """Apply every buffered signal that has a handler. The run's own task, live only."""
    if run.replaying or run.done.done() or run.stopping or not run.signal_handlers:
        return
    async with run.update_lock:
        while run.signals_dirty and not run.stopping:
            run.signals_dirty = False
            batch = await _buffered(run)
            if batch:
                await _apply_batch(run, batch)


async def _apply_batch(run: Run, batch: list[tuple[str, bytes, SignalRecord]]) -> None:
    now = run.services.clock.now()
    boundary = run.steps_allocated
    index = run.update_index.get(boundary, 0)
    ops: list[Op] = []
    conds: list[Expect] = []
    failure: RunEnding | None = None
    for key, raw, signal in batch:
        handler = run.signal_handlers.get(signal.name)
        if handler is None:  # not handled (cannot happen: only handled names are read)
            continue
        applied = AppliedUpdate(
            boundary=boundary,
            index=index,
            update_id=key,
            name=signal.name,
            payload=signal.payload,
            applied_at=now,
            kind=SIGNAL,
        )
        index += 1
        ops += [
            Put(
                key=keys.applied_update(run.id, boundary, applied.index),
                value=records.encode(applied),
            ),
            Delete(key=key),
        ]
        conds.append(Expect(key=key, value=raw))
        try:
            _call(run, handler, signal.payload)
        except Exception as exc:
            log.warning("the handler of signal %r in %s raised: %s", signal.name, run.id, exc)
            failure = _failed(run, signal.name, exc)
            break
    if not ops:
        return

    def recorded(stored: bool) -> None:
        # Memory holds the handlers' changes already: if this commit failed (or another
        # writer took a signal), the run is replayed from what was stored.
        if not stored:
            raise Superseded()
        run.update_index[boundary] = index
        run.notify()  # a wait_until may hold now

    await commit_ahead(run, ops, conds, recorded)
    if failure is not None:
        raise failure
