"""ChainCodec: compression and encryption over the default serialiser, framed with the
codecs that applied; old payloads stay readable; bad configuration is refused."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pytest

from pyweft import ConfigurationError, DefaultPayloadCodec, PayloadError
from pyweft.codecs import (
    AesGcmCodec,
    ChainCodec,
    CodecStep,
    EncryptedPayloadError,
    ZlibCodec,
    ZstdCodec,
    steps_of,
)

K1, K2 = os.urandom(32), os.urandom(16)
BIG = {"lines": ["the same line of text"] * 100, "total": "12.50"}


@dataclass
class Order:
    id: int
    note: str


def test_compression_applies_to_big_payloads_only_and_round_trips() -> None:
    codec = ChainCodec([ZlibCodec(min_size=64)])
    big = codec.encode(BIG)
    assert steps_of(big) == [CodecStep("zlib")]
    assert len(big) < len(DefaultPayloadCodec().encode(BIG)) / 4
    assert codec.decode(big) == BIG
    small = codec.encode({"a": 1})
    assert steps_of(small) == []  # left as it was: a plain payload
    assert codec.decode(small) == {"a": 1}


def test_decoding_keeps_the_annotated_type() -> None:
    codec = ChainCodec([ZlibCodec(min_size=0), AesGcmCodec({"k1": K1}, current="k1")])
    data = codec.encode(Order(id=7, note="x" * 500))
    assert [s.name for s in steps_of(data)] == ["zlib", "aes-gcm"]
    assert codec.decode(data, Order) == Order(id=7, note="x" * 500)


def test_encrypted_bytes_do_not_contain_the_plaintext() -> None:
    codec = ChainCodec([AesGcmCodec({"k1": K1}, current="k1")])
    data = codec.encode({"card": "4111-1111-1111-1111"})
    assert b"4111" not in data
    assert steps_of(data) == [CodecStep("aes-gcm", {"key": "k1"})]
    assert codec.decode(data) == {"card": "4111-1111-1111-1111"}


def test_old_payloads_stay_readable_after_a_key_rotation() -> None:
    before = ChainCodec([AesGcmCodec({"k1": K1}, current="k1")])
    old = before.encode("written under k1")
    after = ChainCodec([AesGcmCodec({"k1": K1, "k2": K2}, current="k2")])
    new = after.encode("written under k2")
    assert steps_of(new)[0].meta == {"key": "k2"}
    assert after.decode(old) == "written under k1"
    assert after.decode(new) == "written under k2"
    retired = ChainCodec([AesGcmCodec({"k2": K2}, current="k2")])
    with pytest.raises(EncryptedPayloadError, match="key 'k1', which is not configured"):
        retired.decode(old)


def test_a_tampered_payload_is_refused() -> None:
    codec = ChainCodec([AesGcmCodec({"k1": K1}, current="k1")])
    data = bytearray(codec.encode("pay 10"))
    data[-1] ^= 1
    with pytest.raises(PayloadError, match="does not decrypt"):
        codec.decode(bytes(data))


def test_payloads_written_before_the_chain_decode_as_they_are() -> None:
    plain = DefaultPayloadCodec().encode({"legacy": True})
    codec = ChainCodec([ZlibCodec(), AesGcmCodec({"k1": K1}, current="k1")])
    assert codec.decode(plain) == {"legacy": True}


def test_the_default_codec_reads_compressed_frames_and_names_encrypted_ones() -> None:
    default = DefaultPayloadCodec()
    compressed = ChainCodec([ZlibCodec(min_size=0)]).encode(BIG)
    assert default.decode(compressed) == BIG
    encrypted = ChainCodec([AesGcmCodec({"k9": K1}, current="k9")]).encode(BIG)
    with pytest.raises(EncryptedPayloadError, match="encrypted \\(aes-gcm, key 'k9'\\)"):
        default.decode(encrypted)


def test_zstd_round_trips_when_installed() -> None:
    try:
        codec = ChainCodec([ZstdCodec(min_size=0)])
    except ConfigurationError as exc:
        assert "pip install 'pyweft[zstd]'" in str(exc)
        return
    data = codec.encode(BIG)
    assert steps_of(data) == [CodecStep("zstd")]
    assert codec.decode(data) == BIG


def test_per_type_converters_are_added_to_the_serialiser() -> None:
    class Money:
        def __init__(self, cents: int) -> None:
            self.cents = cents

    codec = ChainCodec([ZlibCodec(min_size=0)])
    codec.register_type(Money, encode=lambda m: m.cents, decode=Money)
    assert codec.decode(codec.encode(Money(250)), Money).cents == 250


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda: AesGcmCodec({"k1": b"short"}, current="k1"), "16, 24 or 32 bytes"),
        (lambda: AesGcmCodec({"k1": K1}, current="k2"), "current='k2' is not one of"),
        (lambda: AesGcmCodec({}, current="k1"), "non-empty"),
        (lambda: ZlibCodec(level=12), "level must be -1..9"),
        (lambda: ChainCodec([ZlibCodec(), ZlibCodec()]), "unique"),
        (lambda: ChainCodec([object()]), "not a payload codec"),  # type: ignore[list-item]
    ],
)
def test_bad_codec_configuration_is_a_clear_error(make: Any, fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment):
        make()
