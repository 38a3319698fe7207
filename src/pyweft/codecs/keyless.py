"""Undoing what needs no key: how a reader without the chain (the CLI, the server, an
engine with the default codec) still reads compressed payloads, and says which ones
are encrypted instead of failing on them."""

from __future__ import annotations

import zlib

from pyweft.codecs.compression import zstd_decompress
from pyweft.codecs.encryption import EncryptedPayloadError
from pyweft.codecs.envelope import CodecStep, unpack
from pyweft.errors import PayloadError


class EncryptedPayload(str):
    """What a display shows for a payload it cannot decrypt: ``<encrypted: aes-gcm,
    key k2>``. A ``str``, so JSON output and tables take it as it is."""

    __slots__ = ()


def unframe(data: bytes) -> bytes:
    """The serialised payload inside a frame whose codecs all need no key."""
    steps, body = unpack(data)
    for step in reversed(steps):
        body = undo(step, body)
    return body


def undo(step: CodecStep, body: bytes) -> bytes:
    if step.name == "zlib":
        try:
            return zlib.decompress(body)
        except zlib.error as exc:
            raise PayloadError(f"a zlib-compressed payload is damaged: {exc}", path="$") from exc
    if step.name == "zstd":
        return zstd_decompress(body)
    key = step.meta.get("key", "")
    if step.name == "aes-gcm":
        raise EncryptedPayloadError(
            f"this payload is encrypted (aes-gcm, key {key!r}); decode it with an engine "
            "whose ChainCodec has that key",
            key_id=key,
        )
    raise PayloadError(
        f"this payload went through codec {step.name!r}, which this process does not have; "
        "configure the same ChainCodec as the writer",
        path="$",
    )


def placeholder(exc: EncryptedPayloadError) -> EncryptedPayload:
    return EncryptedPayload(f"<encrypted: aes-gcm, key {exc.key_id}>")
