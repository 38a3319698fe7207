"""AES-GCM encryption with key ids, so keys can rotate (``pip install 'pyweft[crypto]'``).

Each payload is encrypted with the *current* key and records that key's id; decoding
looks the id up, so payloads written under an older key stay readable for as long as
that key is still configured. Keys are 16, 24 or 32 bytes (AES-128/192/256). A fresh
random 96-bit nonce is used per payload; the key id is bound as associated data.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pyweft.errors import ConfigurationError, PayloadError

NONCE_BYTES = 12


class EncryptedPayloadError(PayloadError):
    """A payload is encrypted with a key this process does not have."""

    def __init__(self, message: str, *, key_id: str) -> None:
        super().__init__(message, path="$")
        self.key_id = key_id


class AesGcmCodec:
    """``AesGcmCodec({"k1": old, "k2": new}, current="k2")``: encrypt with ``k2``,
    decrypt whichever of ``k1``/``k2`` a payload names."""

    name = "aes-gcm"
    needs_key = True

    def __init__(self, keys: Mapping[str, bytes], *, current: str) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:
            raise ConfigurationError(
                "AesGcmCodec needs the cryptography package: pip install 'pyweft[crypto]'"
            ) from exc
        if not isinstance(keys, Mapping) or not keys:
            raise ConfigurationError("AesGcmCodec needs keys= as a non-empty {key id: bytes} map")
        self._ciphers = {}
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not key_id:
                raise ConfigurationError(
                    f"AesGcmCodec key ids must be non-empty strings: {key_id!r}"
                )
            if not isinstance(key, bytes) or len(key) not in (16, 24, 32):
                raise ConfigurationError(
                    f"AesGcmCodec key {key_id!r} must be 16, 24 or 32 bytes "
                    "(e.g. AESGCM.generate_key(bit_length=256))"
                )
            self._ciphers[key_id] = AESGCM(key)
        if current not in self._ciphers:
            raise ConfigurationError(
                f"AesGcmCodec current={current!r} is not one of the key ids "
                f"({', '.join(sorted(self._ciphers))})"
            )
        self.current = current

    def encode(self, data: bytes) -> tuple[bytes, dict[str, str]]:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self.current].encrypt(nonce, data, _aad(self.current))
        return nonce + sealed, {"key": self.current}

    def decode(self, data: bytes, meta: dict[str, str]) -> bytes:
        from cryptography.exceptions import InvalidTag

        key_id = meta.get("key", "")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise EncryptedPayloadError(
                f"this payload is encrypted with key {key_id!r}, which is not configured "
                f"(known: {', '.join(sorted(self._ciphers))}); keep old keys until no "
                "payload needs them",
                key_id=key_id,
            )
        try:
            return bytes(cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], _aad(key_id)))
        except InvalidTag as exc:
            raise PayloadError(
                f"a payload encrypted with key {key_id!r} does not decrypt: it was altered, "
                "or the key under that id changed",
                path="$",
            ) from exc


def _aad(key_id: str) -> bytes:
    return b"pyweft-aes-gcm:" + key_id.encode()
