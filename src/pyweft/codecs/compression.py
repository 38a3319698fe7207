"""Compression codecs: zlib (standard library) and zstd (``pip install 'pyweft[zstd]'``).

Payloads under ``min_size`` bytes are left as they are (compressing them costs more
than it saves), and so is any payload compression would not make smaller.
"""

from __future__ import annotations

import zlib
from typing import Any

from pyweft.errors import ConfigurationError, PayloadError


class ZlibCodec:
    """zlib (deflate) compression. Needs no key, so any reader can undo it."""

    name = "zlib"
    needs_key = False

    def __init__(self, *, level: int = 6, min_size: int = 256) -> None:
        if not isinstance(level, int) or not -1 <= level <= 9:
            raise ConfigurationError(f"ZlibCodec level must be -1..9, got {level!r}")
        self._level = level
        self.min_size = _min_size(min_size)

    def encode(self, data: bytes) -> tuple[bytes, dict[str, str]] | None:
        if len(data) < self.min_size:
            return None
        packed = zlib.compress(data, self._level)
        return (packed, {}) if len(packed) < len(data) else None

    def decode(self, data: bytes, meta: dict[str, str]) -> bytes:
        try:
            return zlib.decompress(data)
        except zlib.error as exc:
            raise PayloadError(f"a zlib-compressed payload is damaged: {exc}", path="$") from exc


class ZstdCodec:
    """Zstandard compression (faster and smaller than zlib); needs ``zstandard``."""

    name = "zstd"
    needs_key = False

    def __init__(self, *, level: int = 3, min_size: int = 256) -> None:
        self._zstd = zstd_module()
        if self._zstd is None:
            raise ConfigurationError(
                "ZstdCodec needs the zstandard package: pip install 'pyweft[zstd]' "
                "(or use ZlibCodec, which needs nothing)"
            )
        self._level = level
        self.min_size = _min_size(min_size)

    def encode(self, data: bytes) -> tuple[bytes, dict[str, str]] | None:
        if len(data) < self.min_size:
            return None
        packed: bytes = self._zstd.ZstdCompressor(level=self._level).compress(data)
        return (packed, {}) if len(packed) < len(data) else None

    def decode(self, data: bytes, meta: dict[str, str]) -> bytes:
        return zstd_decompress(data)


def zstd_module() -> Any:
    try:
        import zstandard  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    return zstandard


def zstd_decompress(data: bytes) -> bytes:
    module = zstd_module()
    if module is None:
        raise PayloadError(
            "this payload is zstd-compressed and the zstandard package is not installed: "
            "pip install 'pyweft[zstd]'",
            path="$",
        )
    try:
        out: bytes = module.ZstdDecompressor().decompress(data)
    except module.ZstdError as exc:
        raise PayloadError(f"a zstd-compressed payload is damaged: {exc}", path="$") from exc
    return out


def _min_size(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigurationError(f"min_size must be a byte count >= 0, got {value!r}")
    return value
