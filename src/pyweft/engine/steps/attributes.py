"""Search attributes: typed, indexed metadata on runs.

Values are ``str``, ``int``, ``float``, ``bool``, aware ``datetime`` or a list
of ``str``. Each value gets an index key whose bytes sort like the value
(strings by their encoded bytes, numbers by an order-preserving encoding of
the float, datetimes by epoch microseconds), so equality and range filters
are prefix and range scans. A list indexes each element.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec

from pyweft.engine.replay import keys
from pyweft.errors import InvalidArgumentError
from pyweft.storage.base import Delete, Op, Put

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,99}$")
_encoder = msgspec.msgpack.Encoder()


def check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidArgumentError(
            f"search attribute name {name!r} is invalid: use 1-100 characters from "
            "[A-Za-z0-9_.-], starting with a letter or underscore"
        )
    return name


def check_value(name: str, value: object) -> object:
    """The stored form of ``value`` (``None`` removes the attribute)."""
    if value is None or isinstance(value, bool | int | float | str):
        if isinstance(value, float) and value != value:
            raise InvalidArgumentError(f"search attribute {name!r} cannot be NaN")
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidArgumentError(
                f"search attribute {name!r} needs a timezone-aware datetime, got {value!r}"
            )
        return value.astimezone(UTC)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return list(value)
    raise InvalidArgumentError(
        f"search attribute {name!r} has unsupported type {type(value).__name__}; use str, int, "
        "float, bool, an aware datetime or a list of str"
    )


def normalize(attrs: Mapping[str, object]) -> dict[str, object]:
    if not isinstance(attrs, Mapping):
        raise InvalidArgumentError(f"attributes must be a mapping, got {type(attrs).__name__}")
    return {check_name(k): check_value(k, v) for k, v in attrs.items()}


def encode_value(value: object) -> str:
    """One index component that sorts like ``value`` within its type."""
    if isinstance(value, bool):
        return "b1" if value else "b0"
    if isinstance(value, int | float):
        (bits,) = struct.unpack(">Q", struct.pack(">d", float(value)))
        bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | (1 << 63)
        return f"n{bits:016x}"
    if isinstance(value, datetime):
        return "d" + keys.ts16(value.timestamp())
    return "s" + keys.enc(str(value))


def index_values(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return sorted({encode_value(v) for v in value})
    return [encode_value(value)]


def index_key(name: str, encoded: str, created_at: float, workflow_id: str) -> str:
    return f"ix:at:{keys.enc(name)}:{encoded}:{keys.ts16(created_at)}:{keys.enc(workflow_id)}"


def index_prefix(name: str, encoded: str | None = None) -> str:
    base = f"ix:at:{keys.enc(name)}:"
    return base if encoded is None else f"{base}{encoded}:"


def changes(
    workflow_id: str, created_at: float, old: Mapping[str, object], new: Mapping[str, object]
) -> list[Op]:
    """The attribute record and the index keys to add and remove, as ops."""
    ops: list[Op] = []
    for name in sorted({*old, *new}):
        before = set(index_values(old.get(name)))
        after = set(index_values(new.get(name)))
        for enc in sorted(before - after):
            ops.append(Delete(key=index_key(name, enc, created_at, workflow_id)))
        for enc in sorted(after - before):
            ops.append(Put(key=index_key(name, enc, created_at, workflow_id), value=b""))
    ops.append(Put(key=keys.attributes(workflow_id), value=_encoder.encode(dict(new))))
    return ops


def merged(current: Mapping[str, object], update: Mapping[str, object]) -> dict[str, Any]:
    out = dict(current)
    for name, value in update.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def decode_value(encoded: str) -> object:
    """The value an index component stands for (inverse of :func:`encode_value`)."""
    tag, body = encoded[:1], encoded[1:]
    if tag == "b":
        return body == "1"
    if tag == "n":
        bits = int(body, 16)
        bits = bits ^ (1 << 63) if bits >> 63 else bits ^ 0xFFFFFFFFFFFFFFFF
        (value,) = struct.unpack(">d", struct.pack(">Q", bits))
        return int(value) if value.is_integer() else value
    if tag == "d":
        return datetime.fromtimestamp(int(body) / 1_000_000, tz=UTC)
    return keys.dec(body)
