"""Durable shared state: where a value lives and how it is stored.

A value is one record under ``st:r:{owner run}:{name}`` (shared by a run and its
child runs; ``owner`` is the top-most parent) or ``st:t:{workflow type}:{name}``
(shared by every run of a type). Every write is a compare-and-swap on the
record's stored bytes; the record carries a version that only grows, and a
delete leaves a tombstone (``value`` ``None``) so a stale writer cannot bring a
deleted value back.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from pyweft.engine.replay import keys
from pyweft.engine.replay.records import corrupt
from pyweft.errors import InvalidArgumentError

Scope = Literal["run", "workflow"]
SCOPES: tuple[str, ...] = ("run", "workflow")
PREFIX = "st:"
MAX_NAME_BYTES = 200


class StateRecord(msgspec.Struct, array_like=True):
    version: int
    value: bytes | None  # the encoded value; None once deleted
    updated_at: float
    updated_by: str | None = None  # the run (or "operator") that wrote it


_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(StateRecord)


def encode(record: StateRecord) -> bytes:
    return _enc.encode(record)


def decode(raw: bytes, *, key: str) -> StateRecord:
    try:
        return _dec.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise corrupt(key, "state", exc) from exc


def check_name(name: object) -> str:
    return keys.check_text(name, "state name", MAX_NAME_BYTES)


def check_scope(scope: object) -> str:
    if scope not in SCOPES:
        raise InvalidArgumentError(
            f"scope must be 'run' (this run and its children) or 'workflow' (every run of "
            f"the workflow type), got {scope!r}"
        )
    return str(scope)


def run_prefix(owner: str) -> str:
    return keys.state_prefix(owner)


def type_prefix(workflow_type: str) -> str:
    return f"{PREFIX}t:{keys.enc(workflow_type)}:"


def key_for(scope: str, owner: str, name: str) -> str:
    prefix = run_prefix(owner) if scope == "run" else type_prefix(owner)
    return prefix + keys.enc(name)


def name_of(key: str) -> str:
    return keys.dec(key.rsplit(":", 1)[1])
