"""Loading runs back from the store: which runs to resume and their journals.

A run with a record that cannot be decoded raises
:class:`~pyweft.errors.CorruptRecordError` from :func:`load_run`; recovery
quarantines it (see :mod:`pyweft.engine.replay.quarantine`), and this process then
leaves it out of :func:`ids_with_status`, so periodic scans (recovery, the
reclaim of stale claims) neither retry nor re-log it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, cast

from pyweft.engine.replay import keys, records
from pyweft.engine.replay.records import AppliedUpdate, PendingStep, StepRecord, WorkflowState
from pyweft.storage.base import Scan, Storage, read_many

_PAGE = 1000
_SIGNAL_PAGE = 256


@dataclass(slots=True)
class LoadedRun:
    state: WorkflowState
    state_raw: bytes
    journal: dict[int, StepRecord]
    pendings: dict[int, PendingStep]
    applied: list[AppliedUpdate]
    version_pins: dict[str, int] = field(default_factory=dict)
    attributes: dict[str, Any] = field(default_factory=dict)
    attributes_raw: bytes | None = None
    signals: dict[str, list[tuple[str, bytes]]] = field(default_factory=dict)
    """Buffered signals by name, oldest first (read only with ``signals=True``): for each
    name present, its oldest signals, but not necessarily all of them."""


@dataclass(slots=True)
class QuarantineMemo:
    """What this process knows about quarantined runs of one store."""

    skipped: set[str] = field(default_factory=set)  # found damaged here: not loaded again
    markers: set[str] | None = None  # ids with a ``q:`` marker, read once on first use


_memos: weakref.WeakKeyDictionary[Storage, QuarantineMemo] = weakref.WeakKeyDictionary()


def quarantine_memo(storage: Storage) -> QuarantineMemo:
    """This process's memo for ``storage`` (a throwaway one if it cannot be weakly keyed)."""
    try:
        memo = _memos.get(storage)
        if memo is None:
            memo = _memos[storage] = QuarantineMemo()
    except TypeError:  # a storage class with __slots__ and no __weakref__
        return QuarantineMemo()
    return memo


async def ids_with_status(storage: Storage, status: str) -> list[str]:
    """Ids of every run with ``status``, oldest first, minus those quarantined here."""
    prefix = f"ix:s:{status}:"
    skipped = quarantine_memo(storage).skipped
    ids: list[str] = []
    start: str | None = None
    while True:
        rows = await storage.scan(prefix, start=start, limit=_PAGE)
        ids.extend(i for i in (keys.id_from_index_key(k) for k, _ in rows) if i not in skipped)
        if len(rows) < _PAGE:
            return ids
        start = rows[-1][0] + "\x00"


async def load_run(
    storage: Storage, workflow_id: str, *, signals: bool = False
) -> LoadedRun | None:
    """The state, journal and open steps of one run, read in a single scan.

    ``signals``: also read the run's buffered signals (up to a page of them), in the
    same trip to the store, for a run about to be driven: a run woken by a signal then
    finds it without another read.
    Raises ``CorruptRecordError`` naming the first record that cannot be decoded.
    """
    prefix, start, end = keys.run_range(workflow_id)
    buffered: dict[str, list[tuple[str, bytes]]] = {}
    if signals:
        sig_prefix = keys.signal_prefix(workflow_id)
        rows, sig_rows = cast(
            "list[list[tuple[str, bytes]]]",
            await read_many(
                storage,
                [
                    Scan(prefix=prefix, start=start, end=end),
                    Scan(prefix=sig_prefix, limit=_SIGNAL_PAGE),
                ],
            ),
        )
        for key, value in sig_rows:
            name = keys.dec(key[len(sig_prefix) :].split(":", 1)[0])
            buffered.setdefault(name, []).append((key, value))
    else:
        rows = await storage.scan(prefix, start=start, end=end)
    state_raw: bytes | None = None
    journal: dict[int, StepRecord] = {}
    pendings: dict[int, PendingStep] = {}
    applied: list[AppliedUpdate] = []
    pins: dict[str, int] = {}
    attrs_raw: bytes | None = None
    for key, value in rows:
        if key == prefix:
            state_raw = value
        elif not keys.belongs_to_run(key, prefix):
            continue
        elif key[len(prefix) : len(prefix) + 3] == ":j:":
            rec = records.decode_step(value, key=key)
            journal[rec.step] = rec
        elif key[len(prefix) : len(prefix) + 3] == ":p:":
            pend = records.decode_pending(value, key=key)
            pendings[pend.step] = pend
        elif key[len(prefix) : len(prefix) + 3] == ":u:":
            applied.append(records.decode_applied(value, key=key))
        elif key[len(prefix) : len(prefix) + 3] == ":v:":
            pins[keys.dec(key[len(prefix) + 3 :])] = records.decode_version_pin(value, key=key)
        elif key == prefix + ":attrs":
            attrs_raw = value
    if state_raw is None:
        return None
    return LoadedRun(
        records.decode_state(state_raw, key=prefix),
        state_raw,
        journal,
        pendings,
        applied,
        pins,
        records.decode_attributes(attrs_raw, key=prefix + ":attrs") if attrs_raw else {},
        attrs_raw,
        buffered,
    )
