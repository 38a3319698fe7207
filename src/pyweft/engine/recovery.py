"""Loading runs back from the store: which runs to resume and their journals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyweft.engine import keys, records
from pyweft.engine.records import AppliedUpdate, PendingStep, StepRecord, WorkflowState
from pyweft.storage.base import Storage

_PAGE = 1000


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


async def ids_with_status(storage: Storage, status: str) -> list[str]:
    """Ids of every run with ``status``, oldest first."""
    prefix = f"ix:s:{status}:"
    ids: list[str] = []
    start: str | None = None
    while True:
        rows = await storage.scan(prefix, start=start, limit=_PAGE)
        ids.extend(keys.id_from_index_key(k) for k, _ in rows)
        if len(rows) < _PAGE:
            return ids
        start = rows[-1][0] + "\x00"


async def load_run(storage: Storage, workflow_id: str) -> LoadedRun | None:
    """The state, journal and open steps of one run, read in a single scan."""
    prefix, start, end = keys.run_range(workflow_id)
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
            rec = records.decode_step(value)
            journal[rec.step] = rec
        elif key[len(prefix) : len(prefix) + 3] == ":p:":
            pend = records.decode_pending(value)
            pendings[pend.step] = pend
        elif key[len(prefix) : len(prefix) + 3] == ":u:":
            applied.append(records.decode_applied(value))
        elif key[len(prefix) : len(prefix) + 3] == ":v:":
            pins[keys.dec(key[len(prefix) + 3 :])] = int(value)
        elif key == prefix + ":attrs":
            attrs_raw = value
    if state_raw is None:
        return None
    return LoadedRun(
        records.decode_state(state_raw),
        state_raw,
        journal,
        pendings,
        applied,
        pins,
        records.decode_attributes(attrs_raw) if attrs_raw else {},
        attrs_raw,
    )
