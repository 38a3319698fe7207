"""Parameters of the PostgreSQL adapter's writes in binary form (storage/postgres.py):
one caller's validated batch, and the arrays the group functions of pg_sql.py take,
built as bytes so that psycopg sends them without adapting each element."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from psycopg.adapt import Dumper
from psycopg.pq import Format

INT4, INT8, TEXT, BYTEA = 23, 20, 25, 17  # element type oids, checked by the server
INT4_BYTES = struct.Struct("!i")
INT8_BYTES = struct.Struct("!q")
_ARRAY_HEAD = struct.Struct("!iiIii")  # dimensions, has-nulls flag, element oid, length, base
_LENGTH = struct.Struct("!i")
_NULL = _LENGTH.pack(-1)


def group_arrays(batches: Sequence[Batch]) -> tuple[Array, ...]:
    """The condition, delete and put arrays of a group, each batch's slices ending at the
    ``*_end`` offsets (as the group functions take them)."""
    ends: tuple[list[int], list[int], list[int]] = ([], [], [])
    ck: list[bytes] = []
    cv: list[bytes | None] = []
    dk: list[bytes] = []
    pk: list[bytes] = []
    pv: list[bytes] = []
    for batch in batches:
        for key, expected in batch.expected.items():
            ck.append(key.encode())
            cv.append(expected)
        for key, value in batch.final.items():
            if value is None:
                dk.append(key.encode())
            else:
                pk.append(key.encode())
                pv.append(value)
        ends[0].append(len(ck))
        ends[1].append(len(dk))
        ends[2].append(len(pk))
    return (
        array(INT4, (INT4_BYTES.pack(i) for i in ends[0])),
        array(TEXT, ck),
        array(BYTEA, cv),
        array(INT4, (INT4_BYTES.pack(i) for i in ends[1])),
        array(TEXT, dk),
        array(INT4, (INT4_BYTES.pack(i) for i in ends[2])),
        array(TEXT, pk),
        array(BYTEA, pv),
    )


def disjoint(batches: Sequence[Batch]) -> bool:
    """Whether no key is read or written by two of ``batches``."""
    seen: set[str] = set()
    for batch in batches:
        keys = batch.expected.keys() | batch.final.keys()
        if not seen.isdisjoint(keys):
            return False
        seen |= keys
    return True


def disjoint_arrays(batches: Sequence[Batch]) -> tuple[Array, ...]:
    """The arrays of a group of disjoint batches, each element tagged with its batch's
    number (from 1), as the disjoint group function takes them."""
    cb: list[bytes] = []
    ck: list[bytes] = []
    cv: list[bytes | None] = []
    db: list[bytes] = []
    dk: list[bytes] = []
    pb: list[bytes] = []
    pk: list[bytes] = []
    pv: list[bytes] = []
    for number, batch in enumerate(batches, 1):
        tag = INT4_BYTES.pack(number)
        for key, expected in batch.expected.items():
            cb.append(tag)
            ck.append(key.encode())
            cv.append(expected)
        for key, value in batch.final.items():
            if value is None:
                db.append(tag)
                dk.append(key.encode())
            else:
                pb.append(tag)
                pk.append(key.encode())
                pv.append(value)
    return (
        array(INT4, cb),
        array(TEXT, ck),
        array(BYTEA, cv),
        array(INT4, db),
        array(TEXT, dk),
        array(INT4, pb),
        array(TEXT, pk),
        array(BYTEA, pv),
    )


class Batch(NamedTuple):
    """One caller's write, validated: conditions and each key's final value (None: delete)."""

    expected: dict[str, bytes | None]
    final: dict[str, bytes | None]
    notify: str | None = None  # not a write: a channel to notify with the group
    channels: tuple[str, ...] = ()  # a write's own channels, notified with its group


class Array(bytes):
    """An array parameter, already in binary form."""


class ArrayDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return bytes(obj)


def array(oid: int, items: Iterable[bytes | None]) -> Array:
    parts = [b""]
    for item in items:
        parts.append(_NULL if item is None else _LENGTH.pack(len(item)) + item)
    if len(parts) == 1:
        return Array(struct.pack("!iiI", 0, 0, oid))
    parts[0] = _ARRAY_HEAD.pack(1, 0, oid, len(parts) - 1, 1)
    return Array(b"".join(parts))
