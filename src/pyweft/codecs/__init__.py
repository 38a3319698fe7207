"""Payload codec chains: compression and encryption over the default serialiser.

Guide: docs/guides/observability.md ("Payload codecs").
"""

from __future__ import annotations

from pyweft.codecs.chain import BytesCodec, ChainCodec
from pyweft.codecs.compression import ZlibCodec, ZstdCodec
from pyweft.codecs.encryption import AesGcmCodec, EncryptedPayloadError
from pyweft.codecs.envelope import CodecStep, steps_of
from pyweft.codecs.keyless import EncryptedPayload

__all__ = [
    "AesGcmCodec",
    "BytesCodec",
    "ChainCodec",
    "CodecStep",
    "EncryptedPayload",
    "EncryptedPayloadError",
    "ZlibCodec",
    "ZstdCodec",
    "steps_of",
]
