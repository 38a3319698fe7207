"""The frame around a payload that codecs changed: which codecs applied, in order, with
what each needs to undo its work (a key id, never a key).

    0xC1 "PW" 0x01 | header length (2 bytes, big-endian) | header (JSON) | body

0xC1 is the one byte MessagePack never uses, so a framed payload can never be mistaken
for a plain one, and plain payloads (stored before a chain was configured) stay
readable as they are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pyweft.errors import PayloadError

MAGIC = b"\xc1PW\x01"
_MAX_HEADER = 0xFFFF


@dataclass(frozen=True, slots=True)
class CodecStep:
    """One codec that was applied: its ``name`` and what it recorded (``{"key": "k2"}``)."""

    name: str
    meta: dict[str, str] = field(default_factory=dict)


def is_framed(data: bytes) -> bool:
    return data[:4] == MAGIC


def pack(body: bytes, steps: list[CodecStep]) -> bytes:
    header = json.dumps([[s.name, s.meta] for s in steps], separators=(",", ":")).encode()
    if len(header) > _MAX_HEADER:
        raise PayloadError("codec metadata is too large to store", path="$")
    return MAGIC + len(header).to_bytes(2, "big") + header + body


def unpack(data: bytes) -> tuple[list[CodecStep], bytes]:
    """The steps (in the order they were applied) and the body; ``PayloadError`` if the
    frame is damaged."""
    try:
        size = int.from_bytes(data[4:6], "big")
        raw = json.loads(data[6 : 6 + size])
        steps = [
            CodecStep(str(name), {str(k): str(v) for k, v in meta.items()}) for name, meta in raw
        ]
    except (ValueError, TypeError, AttributeError) as exc:
        raise PayloadError(f"the payload's codec frame is damaged: {exc}", path="$") from exc
    return steps, data[6 + size :]


def steps_of(data: bytes) -> list[CodecStep]:
    """Which codecs a stored payload went through (empty for a plain payload)."""
    return unpack(data)[0] if is_framed(data) else []
