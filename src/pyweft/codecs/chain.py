"""``ChainCodec``: payload codecs composed over the default serialiser.

    codec = ChainCodec([ZlibCodec(), AesGcmCodec(keys, current="k2")])
    Engine(..., codec=codec)

Encoding serialises the value (``DefaultPayloadCodec`` unless ``serializer=`` says
otherwise), then applies each codec in the order given; a codec may skip a payload
(compression of a small one). The result is framed with the list of codecs that did
apply (see :mod:`.envelope`), and decoding undoes them in reverse. Payloads without a
frame (written before the chain was configured) decode as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from pyweft.codec import DefaultPayloadCodec, PayloadCodec
from pyweft.codecs.envelope import CodecStep, is_framed, pack, unpack
from pyweft.errors import ConfigurationError, PayloadError


class BytesCodec(Protocol):
    """One stage of a chain: bytes in, bytes out, plus what decoding needs to know."""

    name: str

    def encode(self, data: bytes) -> tuple[bytes, dict[str, str]] | None:
        """The transformed bytes and their metadata, or ``None`` to leave them as they are."""
        ...

    def decode(self, data: bytes, meta: dict[str, str]) -> bytes: ...


class ChainCodec:
    """A :class:`~pyweft.codec.PayloadCodec` that runs ``codecs`` over a serialiser."""

    def __init__(
        self, codecs: Sequence[BytesCodec], *, serializer: PayloadCodec | None = None
    ) -> None:
        stages = tuple(codecs)
        names = [getattr(c, "name", None) for c in stages]
        for codec, name in zip(stages, names, strict=True):
            if not isinstance(name, str) or not callable(getattr(codec, "encode", None)):
                raise ConfigurationError(
                    f"{codec!r} is not a payload codec: it needs a name, encode() and decode()"
                )
        if len(set(names)) != len(names):
            raise ConfigurationError(f"codec names must be unique in a chain, got {names}")
        self.codecs = stages
        self._by_name: dict[str, BytesCodec] = {c.name: c for c in stages}
        self.serializer: PayloadCodec = serializer or DefaultPayloadCodec()

    def register_type(self, cls: type, *, encode: Any, decode: Any) -> None:
        """Per-type converters, added to the serialiser (see DefaultPayloadCodec)."""
        register = getattr(self.serializer, "register_type", None)
        if register is None:
            raise ConfigurationError(f"the serializer {self.serializer!r} has no register_type")
        register(cls, encode=encode, decode=decode)

    def encode(self, value: object) -> bytes:
        data = self.serializer.encode(value)
        steps: list[CodecStep] = []
        for codec in self.codecs:
            done = codec.encode(data)
            if done is not None:
                data, meta = done
                steps.append(CodecStep(codec.name, meta))
        return pack(data, steps) if steps else data

    def decode(self, data: bytes, into: object = Any) -> Any:
        return self.serializer.decode(self.unframe(data), into)

    def unframe(self, data: bytes) -> bytes:
        """The serialised bytes inside ``data`` (all codecs undone)."""
        if not is_framed(data):
            return data
        steps, body = unpack(data)
        for step in reversed(steps):
            codec = self._by_name.get(step.name)
            if codec is None:
                raise PayloadError(
                    f"this payload went through codec {step.name!r}, which this chain does "
                    f"not have (it has: {', '.join(self._by_name) or 'none'})",
                    path="$",
                )
            body = codec.decode(body, step.meta)
        return body
