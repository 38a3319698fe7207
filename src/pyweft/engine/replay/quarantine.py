"""Quarantine: a run with a record that cannot be decoded is set aside, never driven.

One damaged record must not stop an engine from opening, nor the other runs
from being recovered. When recovery (or a scan that would drive a run) meets
a :class:`~pyweft.errors.CorruptRecordError`, the run is quarantined: the
engine writes a ``q:{id}`` marker holding the bad key and the error (the
damaged state record itself cannot be rewritten: it cannot be read), logs it
once at ERROR, and carries on. A marker written earlier, by this process or
another, is not logged again.

Readers report such a run as ``quarantined`` (``describe``, ``list``, the
CLI) and ``result()`` raises the ``CorruptRecordError``. Once the record is
repaired (restored from a backup), the next engine to open loads the run
cleanly, lifts the marker and drives the run again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec

from pyweft.engine.replay import keys, records
from pyweft.engine.replay.records import WorkflowState
from pyweft.engine.replay.recovery import LoadedRun, QuarantineMemo, load_run, quarantine_memo
from pyweft.errors import CorruptRecordError
from pyweft.storage.base import Delete, Expect, Put, Storage

if TYPE_CHECKING:
    from pyweft.engine.control.core import EngineCore

log = logging.getLogger("pyweft.quarantine")


class QuarantineRecord(msgspec.Struct, array_like=True, frozen=True):
    """The ``q:{id}`` marker: which key of the run is damaged, and how."""

    workflow_id: str
    key: str
    error: str
    at: float


_marker_dec = msgspec.msgpack.Decoder(QuarantineRecord)


def decode_marker(raw: bytes, *, key: str) -> QuarantineRecord:
    try:
        return _marker_dec.decode(raw)
    except (ValueError, TypeError) as exc:
        raise records.corrupt(key, "quarantine marker", exc) from exc


def error_of(marker: QuarantineRecord) -> CorruptRecordError:
    """The error readers raise for a run quarantined by ``marker``."""
    return CorruptRecordError(
        f"workflow {marker.workflow_id!r} is quarantined: {marker.error}",
        key=marker.key,
        workflow_id=marker.workflow_id,
    )


async def markers(storage: Storage, *, limit: int | None = None) -> dict[str, QuarantineRecord]:
    """Every quarantine marker in the store, by workflow id (damaged markers are skipped)."""
    found: dict[str, QuarantineRecord] = {}
    for key, raw in await storage.scan(keys.QUARANTINE_PREFIX, limit=limit):
        try:
            found[keys.dec(key[len(keys.QUARANTINE_PREFIX) :])] = decode_marker(raw, key=key)
        except CorruptRecordError:
            continue  # doctor names it; a reader has nothing to show for it
    return found


async def marker(storage: Storage, workflow_id: str) -> QuarantineRecord | None:
    key = keys.quarantine(workflow_id)
    raw = await storage.get(key)
    if raw is None:
        return None
    try:
        return decode_marker(raw, key=key)
    except CorruptRecordError:
        return None


async def _known_markers(storage: Storage, memo: QuarantineMemo) -> set[str]:
    if memo.markers is None:
        memo.markers = {
            keys.dec(k[len(keys.QUARANTINE_PREFIX) :])
            for k, _ in await storage.scan(keys.QUARANTINE_PREFIX)
        }
    return memo.markers


async def load(core: EngineCore, workflow_id: str) -> LoadedRun | None:
    """:func:`load_run` for a run about to be driven; ``None`` if it is quarantined.

    A run found damaged is quarantined (see :func:`report`). A run that loads
    cleanly but carries a marker was repaired: its marker is lifted.
    """
    memo = quarantine_memo(core.storage)
    if workflow_id in memo.skipped:
        return None
    try:
        loaded = await load_run(core.storage, workflow_id, signals=True)
    except CorruptRecordError as exc:
        await report(core, workflow_id, exc)
        return None
    if loaded is not None and workflow_id in await _known_markers(core.storage, memo):
        await _lift(core, workflow_id, memo)
    return loaded


async def report(core: EngineCore, workflow_id: str, exc: CorruptRecordError) -> None:
    """Quarantine ``workflow_id``: remember it here, mark it in the store, log it once.

    Never raises: it runs inside recovery and background scans, which must go
    on with the other runs.
    """
    memo = quarantine_memo(core.storage)
    memo.skipped.add(workflow_id)
    try:
        known = await _known_markers(core.storage, memo)
        if workflow_id in known:
            log.debug("run %r is still quarantined (%s)", workflow_id, exc.key)
            return
        key = keys.quarantine(workflow_id)
        value = records.encode(
            QuarantineRecord(
                workflow_id=workflow_id, key=exc.key, error=str(exc), at=core.clock.now()
            )
        )
        written = await core.committer.commit(
            [Put(key=key, value=value)], [Expect(key=key, value=None)]
        )
        known.add(workflow_id)
    except Exception as write_error:  # the store is failing too: say so once, go on
        log.error(
            "run %r is quarantined (not driven) because a record cannot be decoded: %s; "
            "the quarantine marker could not be stored either: %s",
            workflow_id,
            exc,
            write_error,
        )
        return
    if written:
        log.error(
            "run %r is quarantined and will not be driven: %s. Other runs carry on; "
            "`pyweft doctor` lists every damaged key",
            workflow_id,
            exc,
        )


async def _lift(core: EngineCore, workflow_id: str, memo: QuarantineMemo) -> None:
    key = keys.quarantine(workflow_id)
    raw = await core.storage.get(key)
    if raw is not None and await core.committer.commit(
        [Delete(key=key)], [Expect(key=key, value=raw)]
    ):
        log.warning("run %r reads cleanly again: its quarantine is lifted", workflow_id)
    if memo.markers is not None:
        memo.markers.discard(workflow_id)


async def state(core: EngineCore, workflow_id: str) -> WorkflowState | None:
    """A run's stored state for a background scan: ``None`` if absent or quarantined."""
    key = keys.wf(workflow_id)
    if workflow_id in quarantine_memo(core.storage).skipped:
        return None
    raw = await core.storage.get(key)
    if raw is None:
        return None
    try:
        return records.decode_state(raw, key=key)
    except CorruptRecordError as exc:
        await report(core, workflow_id, exc)
        return None
