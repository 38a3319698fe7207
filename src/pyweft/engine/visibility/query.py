"""Filtering runs through secondary indexes: ``list`` and ``aggregate``.

A filter is validated completely before anything is read. One index then
drives the scan (parent, an attribute value, a tag, status and type, type,
an attribute range, an id prefix, or all runs, in that order of preference),
newest first, and the remaining conditions are checked on each candidate's
state. Pages resume after the last run returned, so paging is stable while
runs are added.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import heapq
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyweft.durations import parse_timestamp
from pyweft.engine.replay import keys, records
from pyweft.engine.replay.records import ALL_STATUSES, WorkflowState
from pyweft.engine.steps import attributes
from pyweft.errors import CorruptRecordError, InvalidArgumentError
from pyweft.storage.base import Storage, prefix_end

_CHUNK = 256
_RANGE_OPS = ("gt", "gte", "lt", "lte")


@dataclass(frozen=True, slots=True)
class AttrCondition:
    name: str
    equals: object = None
    bounds: dict[str, object] = field(default_factory=dict)

    def matches(self, value: object) -> bool:
        values = value if isinstance(value, list) else [value]
        if not self.bounds:
            return any(v == self.equals for v in values)
        for v in values:
            if v is None:
                continue
            try:
                if all(_compare(v, op, bound) for op, bound in self.bounds.items()):
                    return True
            except TypeError:
                continue
        return False


def _compare(value: Any, op: str, bound: Any) -> bool:
    if op == "gt":
        return bool(value > bound)
    if op == "gte":
        return bool(value >= bound)
    if op == "lt":
        return bool(value < bound)
    return bool(value <= bound)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFilter:
    statuses: tuple[str, ...] = ()
    workflow_type: str | None = None
    id_prefix: str | None = None
    parent_id: str | None = None
    created_after: float | None = None
    created_before: float | None = None
    updated_after: float | None = None
    updated_before: float | None = None
    attributes: tuple[AttrCondition, ...] = ()
    tags: tuple[str, ...] = ()
    schedule_id: str | None = None
    failure_category: str | None = None

    def matches_position(self, position: str) -> bool:
        """What can be checked of a run from its index position alone (id and creation time).

        Used for a run whose state record cannot be decoded: it is listed (as
        quarantined) when these hold, since the driving index named it.
        """
        created, _, encoded = position.partition(":")
        if self.id_prefix is not None and not keys.dec(encoded).startswith(self.id_prefix):
            return False
        return _in_range(int(created) / 1e6, self.created_after, self.created_before)

    def matches(self, state: WorkflowState, attrs: Mapping[str, object]) -> bool:
        if self.statuses and state.status not in self.statuses:
            return False
        if self.workflow_type is not None and state.type != self.workflow_type:
            return False
        if self.id_prefix is not None and not state.id.startswith(self.id_prefix):
            return False
        if self.parent_id is not None and state.parent_id != self.parent_id:
            return False
        if not _in_range(state.created_at, self.created_after, self.created_before):
            return False
        if not _in_range(state.updated_at, self.updated_after, self.updated_before):
            return False
        if any(tag not in state.tags for tag in self.tags):
            return False
        if self.schedule_id is not None and state.schedule_id != self.schedule_id:
            return False
        if self.failure_category is not None and (
            records.failure_category(state.status, state.error) != self.failure_category
        ):
            return False
        return all(c.matches(attrs.get(c.name)) for c in self.attributes)


def _in_range(value: float, after: float | None, before: float | None) -> bool:
    return (after is None or value >= after) and (before is None or value < before)


def _time(value: object, what: str) -> float | None:
    if value is None:
        return None
    return parse_timestamp(value, field=what, error=InvalidArgumentError)


def build_filter(
    *,
    status: str | Sequence[str] | None = None,
    workflow_type: str | None = None,
    id_prefix: str | None = None,
    parent_id: str | None = None,
    created_after: object = None,
    created_before: object = None,
    updated_after: object = None,
    updated_before: object = None,
    attributes: Mapping[str, object] | None = None,
    tags: Sequence[str] | None = None,
    schedule_id: str | None = None,
    failure_category: str | None = None,
) -> RunFilter:
    """Validate every filter argument; raise ``InvalidArgumentError`` before any read."""
    statuses: tuple[str, ...] = ()
    if status is not None:
        statuses = (status,) if isinstance(status, str) else tuple(status)
        for s in statuses:
            if s not in ALL_STATUSES:
                raise InvalidArgumentError(
                    f"unknown status {s!r}; use one of: {', '.join(ALL_STATUSES)}"
                )
    for name, value in (
        ("workflow_type", workflow_type),
        ("id_prefix", id_prefix),
        ("parent_id", parent_id),
        ("schedule_id", schedule_id),
    ):
        if value is not None and (not isinstance(value, str) or not value):
            raise InvalidArgumentError(f"{name} must be a non-empty string, got {value!r}")
    conditions = []
    for name, spec in (attributes or {}).items():
        attributes_check = _attr_condition(name, spec)
        conditions.append(attributes_check)
    if failure_category is not None and failure_category not in records.FAILURE_CATEGORIES:
        raise InvalidArgumentError(
            f"unknown failure_category {failure_category!r}; use one of: "
            f"{', '.join(records.FAILURE_CATEGORIES)}"
        )
    tag_list = tuple(tags or ())
    if any(not isinstance(t, str) or not t for t in tag_list):
        raise InvalidArgumentError("tags must be non-empty strings")
    return RunFilter(
        statuses=statuses,
        workflow_type=workflow_type,
        id_prefix=id_prefix,
        parent_id=parent_id,
        created_after=_time(created_after, "created_after"),
        created_before=_time(created_before, "created_before"),
        updated_after=_time(updated_after, "updated_after"),
        updated_before=_time(updated_before, "updated_before"),
        attributes=tuple(conditions),
        tags=tag_list,
        schedule_id=schedule_id,
        failure_category=failure_category,
    )


def _attr_condition(name: str, spec: object) -> AttrCondition:
    attributes.check_name(name)
    if isinstance(spec, Mapping):
        unknown = set(spec) - set(_RANGE_OPS)
        if unknown or not spec:
            raise InvalidArgumentError(
                f"attribute filter {name!r} must be a value or a dict with keys from "
                f"{', '.join(_RANGE_OPS)}, got {dict(spec)!r}"
            )
        bounds = {op: attributes.check_value(name, v) for op, v in spec.items()}
        kinds = {type(v) if not isinstance(v, int | float) else float for v in bounds.values()}
        if len(kinds) > 1:
            raise InvalidArgumentError(f"attribute filter {name!r} mixes value types")
        return AttrCondition(name=name, bounds=bounds)
    value = attributes.check_value(name, spec)
    if value is None or isinstance(value, list):
        raise InvalidArgumentError(
            f"attribute filter {name!r} must compare to one value (str, number, bool, datetime)"
        )
    return AttrCondition(name=name, equals=value)


# --- cursor ------------------------------------------------------------------------------


def encode_cursor(position: str) -> str:
    return base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    created, _, ident = text.partition(":")
    if len(created) != 16 or not created.isdigit() or not ident:
        raise InvalidArgumentError(
            "cursor is not valid; pass the next_cursor returned by the previous page"
        )
    return text


# --- candidate sources --------------------------------------------------------------------


async def _ordered(
    storage: Storage, prefix: str, flt: RunFilter, after: str | None
) -> AsyncIterator[str]:
    """Positions ``{created16}:{id}`` under ``prefix``, newest first, below ``after``."""
    low = prefix if flt.created_after is None else prefix + keys.ts16(flt.created_after)
    high = prefix_end(prefix)
    if flt.created_before is not None:
        high = prefix + keys.ts16(flt.created_before)
    if after is not None:
        bound = prefix + after
        high = bound if high is None else min(high, bound)
    while True:
        rows = await storage.scan(prefix, start=low, end=high, limit=_CHUNK, reverse=True)
        for key, _ in rows:
            yield key[len(prefix) :]
        if len(rows) < _CHUNK:
            return
        high = rows[-1][0]


async def _merged(sources: list[AsyncIterator[str]]) -> AsyncIterator[str]:
    heads: list[tuple[str, int]] = []
    for i, src in enumerate(sources):
        first = await anext(src, None)
        if first is not None:
            heapq.heappush(heads, (_desc(first), i))
    while heads:
        key, i = heapq.heappop(heads)
        yield _undesc(key)
        nxt = await anext(sources[i], None)
        if nxt is not None:
            heapq.heappush(heads, (_desc(nxt), i))


def _desc(position: str) -> str:
    return "".join(chr(0x10FFFF - ord(c)) for c in position)


def _undesc(key: str) -> str:
    return "".join(chr(0x10FFFF - ord(c)) for c in key)


async def _collected(
    storage: Storage, prefix: str, start: str | None, end: str | None, after: str | None
) -> AsyncIterator[str]:
    """Positions from keys whose last two parts are ``created16`` and an id (any order)."""
    rows = await storage.scan(prefix, start=start, end=end)
    positions = []
    for key, _ in rows:
        parts = key.split(":")
        if prefix.startswith("ix:id:"):
            positions.append(f"{parts[-1]}:{parts[-2]}")
        else:
            positions.append(f"{parts[-2]}:{parts[-1]}")
    for position in sorted(set(positions), reverse=True):
        if after is None or position < after:
            yield position


def _ordered_prefixes(flt: RunFilter) -> list[list[str]]:
    """Every index that can drive ``flt`` in creation order; each is a list of prefixes
    to merge (several statuses)."""
    t = None if flt.workflow_type is None else keys.enc(flt.workflow_type)
    options: list[list[str]] = []
    if flt.parent_id is not None:
        options.append([f"ix:p:{keys.enc(flt.parent_id)}:"])
    if flt.schedule_id is not None:
        options.append([f"ix:sch:{keys.enc(flt.schedule_id)}:"])
    for cond in flt.attributes:
        if not cond.bounds:
            enc = attributes.encode_value(cond.equals)
            options.append([attributes.index_prefix(cond.name, enc)])
    for tag in flt.tags:
        options.append([f"ix:tag:{keys.enc(tag)}:"])
    if flt.statuses:
        options.append([f"ix:st:{s}:{t}:" if t else f"ix:s:{s}:" for s in flt.statuses])
    elif t is not None:
        options.append([f"ix:t:{t}:"])
    return options


async def candidates(storage: Storage, flt: RunFilter, after: str | None) -> AsyncIterator[str]:
    """The driving index scan for ``flt``: positions ``{created16}:{encoded id}``.

    When several indexes could drive the scan and the store can count keys,
    the one with the fewest entries wins, so combined filters stay cheap.
    """
    options = _ordered_prefixes(flt)
    count = getattr(storage, "count", None)
    if len(options) > 1 and count is not None:
        sizes = [sum([await count(p) for p in prefixes]) for prefixes in options]
        options = [options[sizes.index(min(sizes))]]
    if options:
        prefixes = options[0]
        source = (
            _ordered(storage, prefixes[0], flt, after)
            if len(prefixes) == 1
            else _merged([_ordered(storage, p, flt, after) for p in prefixes])
        )
    else:
        source = _unordered(storage, flt, after)
    async for position in source:
        yield position


def _unordered(storage: Storage, flt: RunFilter, after: str | None) -> AsyncIterator[str]:
    for cond in flt.attributes:
        prefix = attributes.index_prefix(cond.name)
        low = cond.bounds.get("gte", cond.bounds.get("gt"))
        high = cond.bounds.get("lte", cond.bounds.get("lt"))
        start = None if low is None else prefix + attributes.encode_value(low)
        end = None if high is None else prefix + attributes.encode_value(high) + ";"
        return _collected(storage, prefix, start, end, after)
    if flt.id_prefix is not None:
        return _collected(storage, f"ix:id:{keys.enc(flt.id_prefix)}", None, None, after)
    return _ordered(storage, "ix:a:", flt, after)


def is_position(position: str) -> bool:
    """Whether an index entry has the ``{created16}:{encoded id}`` form every index writes.

    Anything else (a key of an unknown form, damaged or written by something
    else) is skipped by listings, and named by ``pyweft doctor``.
    """
    created, sep, encoded = position.partition(":")
    return bool(sep) and len(created) == 16 and created.isdigit() and bool(encoded)


Found = tuple[str, WorkflowState | CorruptRecordError, dict[str, Any]]


async def matching(
    storage: Storage, flt: RunFilter, after: str | None = None
) -> AsyncIterator[tuple[str, WorkflowState, dict[str, Any]]]:
    """Runs matching ``flt``, newest first: (position, state, attributes).

    Runs whose records cannot be decoded are left out; see :func:`found`.
    """
    async for position, state, attrs in found(storage, flt, after):
        if isinstance(state, WorkflowState):
            yield position, state, attrs


async def found(storage: Storage, flt: RunFilter, after: str | None = None) -> AsyncIterator[Found]:
    """Like :func:`matching`, but a run whose state (or attributes) cannot be decoded is
    yielded too, with the ``CorruptRecordError`` in place of its state, when the filter's
    id and creation-time conditions hold for it."""
    need_attrs = bool(flt.attributes)
    batch: list[str] = []
    size = 16  # grows: a first page is cheap, long scans read in bigger gulps
    async for position in candidates(storage, flt, after):
        if not is_position(position):
            continue
        batch.append(position)
        if len(batch) >= size:
            async for hit in _fetch(storage, flt, batch, need_attrs):
                yield hit
            batch, size = [], min(size * 2, _CHUNK)
    async for hit in _fetch(storage, flt, batch, need_attrs):
        yield hit


async def _fetch(
    storage: Storage, flt: RunFilter, positions: list[str], need_attrs: bool
) -> AsyncIterator[Found]:
    """Read the candidates' states (and attributes) together, then filter in order."""
    ids = [keys.dec(p.split(":", 1)[1]) for p in positions]
    reads = [storage.get(keys.wf(i)) for i in ids]
    if need_attrs:
        reads += [storage.get(keys.attributes(i)) for i in ids]
    raws = await asyncio.gather(*reads)
    for n, position in enumerate(positions):
        raw = raws[n]
        if raw is None:
            continue
        try:
            state = records.decode_state(raw, key=keys.wf(ids[n]))
            attrs: dict[str, Any] = {}
            if need_attrs:
                attrs_raw = raws[len(ids) + n]
                attrs_key = keys.attributes(ids[n])
                attrs = records.decode_attributes(attrs_raw, key=attrs_key) if attrs_raw else {}
        except CorruptRecordError as exc:
            if flt.matches_position(position):
                yield position, exc, {}
            continue
        if flt.matches(state, attrs):
            yield position, state, attrs
