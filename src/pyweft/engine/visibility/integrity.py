"""Checking a whole store: decode every record the engine wrote, name each damaged key.

``pyweft doctor`` runs this. Each key is recognised by its prefix (the layout
in :mod:`pyweft.engine.replay.keys`) and its value decoded as the record that key
holds; index keys, whose values are empty, are checked for the form every
index writes. A key under a prefix pyweft does not know is reported apart,
as unrecognised rather than damaged: a newer pyweft, or another program, may
have written it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyweft.engine.replay import keys, quarantine, records
from pyweft.engine.steps import async_completion
from pyweft.errors import CorruptRecordError
from pyweft.storage.base import Storage

_PAGE = 1000
_STAMP = 16

# Prefixes whose values hold nothing to decode (markers, opaque ids) or are checked
# by their own subsystem (leases, claims, liveness).
_KEY_ONLY = (
    "sigres:",
    "upx:",
    "rvw:",
    "wake:",
    "own:",
    "lease:",
    "liveness:",
    "meta:",
    "sched:",
    "sched-due:",
    "st:",
    "lk:",
    "wfq:",  # workflow queues (engine/queues/layout.py)
    "tk:",  # activity task queues (engine/tasks): tasks, claims, outcomes, workers, limits
)


@dataclass(frozen=True, kw_only=True, slots=True)
class DamagedRecord:
    """A stored key whose value (or, for an index, whose key) pyweft cannot read."""

    key: str
    workflow_id: str | None
    problem: str


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreCheck:
    """What :func:`check_records` found."""

    checked: int
    damaged: list[DamagedRecord] = field(default_factory=list)
    unrecognised: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)  # ids with a quarantine marker


Progress = Callable[[int, int | None], None]
"""Called after each page with (keys checked so far, total keys or None if unknown)."""


async def check_records(storage: Storage, *, progress: Progress | None = None) -> StoreCheck:
    """Decode every record in ``storage``; never raises for what it reads."""
    count = getattr(storage, "count", None)
    total: int | None = await count("") if count is not None else None
    damaged: list[DamagedRecord] = []
    unrecognised: list[str] = []
    quarantined: list[str] = []
    checked = 0
    start: str | None = None
    while True:
        rows = await storage.scan("", start=start, limit=_PAGE)
        for key, value in rows:
            checked += 1
            if key.startswith(keys.QUARANTINE_PREFIX):
                quarantined.append(keys.dec(key[len(keys.QUARANTINE_PREFIX) :]))
            try:
                known = _check(key, value)
            except CorruptRecordError as exc:
                problem = str(exc).removesuffix(records.REPAIR_ADVICE)
                damaged.append(DamagedRecord(key=key, workflow_id=exc.workflow_id, problem=problem))
                continue
            if not known:
                unrecognised.append(key)
        if progress is not None:
            progress(checked, total)
        if len(rows) < _PAGE:
            break
        start = rows[-1][0] + "\x00"
    return StoreCheck(
        checked=checked, damaged=damaged, unrecognised=unrecognised, quarantined=quarantined
    )


def _check(key: str, value: bytes) -> bool:
    """Decode ``value`` as what ``key`` holds; False for a key of no known prefix."""
    if key.startswith("wf:"):
        _check_run_key(key, value)
    elif key.startswith("ix:"):
        _check_index(key)
    elif key.startswith("rvix:"):
        _expect_parts(key, 4, stamp_at=2)
    elif key.startswith(keys.QUARANTINE_PREFIX):
        quarantine.decode_marker(value, key=key)
    elif key.startswith(("idem:", "upk:", "upo:")):
        _text(key, value, "workflow or update id")
    elif key.startswith("sigseq:"):
        records.decode_version_pin(value, key=key)  # decimal text, like a pin
    else:
        decoder = _DECODERS.get(key.split(":", 1)[0] + ":")
        if decoder is not None:
            decoder(value, key)
        elif not key.startswith(_KEY_ONLY):
            return False
    return True


_DECODERS: dict[str, Callable[[bytes, str], object]] = {
    "sig:": lambda v, k: records.decode_signal(v, key=k),
    "upd:": lambda v, k: records.decode_update(v, key=k),
    "upr:": lambda v, k: records.decode_response(v, key=k),
    "qry:": lambda v, k: records.decode_query(v, key=k),
    "qrs:": lambda v, k: records.decode_query_response(v, key=k),
    "review:": lambda v, k: records.decode_review(v, key=k),
}


def _check_run_key(key: str, value: bytes) -> None:
    _, _, rest = key[len("wf:") :].partition(":")
    if not rest:
        records.decode_state(value, key=key)
        return
    kind, _, tail = rest.partition(":")
    if kind == "j":
        step = records.decode_step(value, key=key)
        if tail != f"{step.step:010d}":
            raise records.corrupt(key, "journal entry", f"it records step {step.step}")
    elif kind == "p":
        pend = records.decode_pending(value, key=key)
        if tail != f"{pend.step:010d}":
            raise records.corrupt(key, "open step", f"it records step {pend.step}")
    elif kind == "u":
        records.decode_applied(value, key=key)
    elif kind == "v":
        records.decode_version_pin(value, key=key)
    elif rest == "attrs":
        records.decode_attributes(value, key=key)
    elif kind == "ar":  # an async activity's outcome, until its step records it
        async_completion.decode_outcome(value, key=key)
    elif kind == "ah":  # a heartbeat sent by token to an activity waiting for completion
        async_completion.decode_beat(value, key=key)
    else:
        raise records.corrupt(key, "run record", f"no run record is kept under {':' + rest!r}")


# Index kinds: how many ':'-separated parts their keys have, and where the 16-digit
# time stamp sits (an index value is empty; its key is the record).
_INDEX_FORMS = {
    "s": (5, 3),
    "st": (6, 4),
    "t": (5, 3),
    "a": (4, 2),
    "p": (5, 3),
    "tag": (5, 3),
    "sch": (5, 3),
    "id": (4, 3),
    "u": (4, 2),
    "end": (5, 3),
    "at": (6, 4),
}


def _check_index(key: str) -> None:
    kind = key.split(":", 2)[1]
    form = _INDEX_FORMS.get(kind)
    if form is None:
        raise records.corrupt(key, "index entry", f"there is no index {kind!r}")
    _expect_parts(key, form[0], stamp_at=form[1])
    if kind in ("s", "st", "end") and key.split(":")[2] not in records.ALL_STATUSES:
        raise records.corrupt(key, "index entry", f"unknown status {key.split(':')[2]!r}")


def _expect_parts(key: str, parts: int, *, stamp_at: int) -> None:
    found = key.split(":")
    if len(found) != parts or not all(found):
        raise records.corrupt(
            key, "index entry", f"expected {parts} non-empty parts separated by ':'"
        )
    stamp = found[stamp_at]
    if len(stamp) != _STAMP or not stamp.isdigit():
        raise records.corrupt(key, "index entry", f"{stamp!r} is not a 16-digit time stamp")


def _text(key: str, value: bytes, what: str) -> None:
    try:
        value.decode()
    except UnicodeDecodeError as exc:
        raise records.corrupt(key, what, exc) from exc
