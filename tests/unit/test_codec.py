"""The default payload codec: round trips, error paths, call annotations and argument arrays."""

from __future__ import annotations

import enum
import functools
import ipaddress
import pathlib
import socket
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Annotated, Any, Literal, NamedTuple, Optional, TypedDict

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyweft.codec import (
    DefaultPayloadCodec,
    PayloadCodec,
    call_types,
    decode_args,
    encode_args,
    payload_size_error,
)
from pyweft.errors import PayloadError


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclass
class Item:
    sku: str
    price: Decimal
    qty: int = 1


@dataclass
class Order:
    id: int
    items: list[Item]
    placed_at: datetime
    tags: set[str] = field(default_factory=set)


class Point(msgspec.Struct):
    x: int
    y: int


class Pair(NamedTuple):
    left: int
    right: str


class Movie(TypedDict):
    title: str
    year: int


class Widget:
    """Something no codec knows how to store."""


codec = DefaultPayloadCodec()


def round_trip(value: object, into: object = Any) -> Any:
    return codec.decode(codec.encode(value), into)


# --- round trips with annotations ---------------------------------------------------

AWARE = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
ORDER = Order(
    id=7,
    items=[Item("a", Decimal("9.99")), Item("b", Decimal("0.10"), qty=3)],
    placed_at=AWARE,
    tags={"gift"},
)


@pytest.mark.parametrize(
    ("value", "into"),
    [
        (None, None),
        (True, bool),
        (-(2**63), int),
        (2**64 - 1, int),
        (1.25, float),
        (float("inf"), float),
        ("héllo", str),
        ([1, 2, 3], list[int]),
        ({"a": [1, {"b": None}]}, dict[str, Any]),
        (AWARE, datetime),
        (datetime(2024, 5, 6, 7, 8, 9), datetime),
        (date(2024, 2, 29), date),
        (time(13, 45, 1, 500), time),
        (time(13, 45, tzinfo=UTC), time),
        (timedelta(days=2, seconds=5, microseconds=7), timedelta),
        (uuid.UUID("12345678-1234-5678-1234-567812345678"), uuid.UUID),
        (Decimal("1.10"), Decimal),
        (Decimal("-0.000000000000000000000000000000001"), Decimal),
        (b"\x00\xff raw", bytes),
        (bytearray(b"\x01\x02"), bytearray),
        ((1, "a"), tuple[int, str]),
        ((1, 2, 3), tuple[int, ...]),
        ({1, 2, 3}, set[int]),
        (frozenset({"x"}), frozenset[str]),
        (Color.BLUE, Color),
        (Priority.HIGH, Priority),
        (ORDER, Order),
        ([Item("a", Decimal("1.5"))], list[Item]),
        (Point(1, 2), Point),
        (Pair(1, "r"), Pair),
        ({"title": "Heat", "year": 1995}, Movie),
        (None, Optional[int]),  # noqa: UP045 (the spelling under test)
        (5, int | None),
        ("five", int | str),
        ("b", Literal["a", "b"]),
        ({"k": Decimal("2.50")}, dict[str, Decimal]),
        ({1: "one"}, dict[int, str]),
        ([(1, "a"), (2, "b")], list[tuple[int, str]]),
    ],
)
def test_values_come_back_as_the_annotated_type(value: object, into: object) -> None:
    decoded = round_trip(value, into)
    assert decoded == value
    assert type(decoded) is type(value)


def test_decimals_keep_their_exact_digits() -> None:
    for text in ("1.10", "0.1", "123456789012345678901234567890.123456789", "1E+3", "-0"):
        assert str(round_trip(Decimal(text), Decimal)) == text


def test_aware_datetimes_keep_the_instant_and_come_back_in_utc() -> None:
    tokyo = datetime(2024, 1, 1, 9, 0, tzinfo=timezone(timedelta(hours=9)))
    decoded = round_trip(tokyo, datetime)
    assert decoded == tokyo
    assert decoded.utcoffset() == timedelta(0)


def test_nested_dataclasses_are_rebuilt_field_by_field() -> None:
    decoded = round_trip(ORDER, Order)
    assert isinstance(decoded.items[1], Item)
    assert decoded.items[1].price == Decimal("0.10")
    assert decoded.tags == {"gift"}
    assert decoded.placed_at == AWARE


def test_annotated_constraints_are_enforced_on_decode() -> None:
    with pytest.raises(PayloadError, match=">= 0"):
        round_trip(-1, Annotated[int, msgspec.Meta(ge=0)])


def test_annotations_msgspec_cannot_use_decode_as_any() -> None:
    assert round_trip({"a": 1}, "NotAType") == {"a": 1}


def test_unhashable_annotations_still_decode() -> None:
    assert round_trip(3, Annotated[int, {"unhashable": "metadata"}]) == 3


def test_a_value_meeting_an_abstract_annotation_passes_through() -> None:
    assert round_trip([1, 2], Iterable[int]) == [1, 2]
    with pytest.raises(PayloadError, match="Expected `Callable"):
        round_trip([1, 2], Callable[[], int])


def test_the_default_codec_satisfies_the_protocol() -> None:
    custom: PayloadCodec = DefaultPayloadCodec()
    assert custom.decode(custom.encode([1])) == [1]


# --- round trips without annotations -----------------------------------------------


@pytest.mark.parametrize(
    ("value", "natural"),
    [
        (AWARE, AWARE),
        (datetime(2024, 5, 6, 7, 8, 9), "2024-05-06T07:08:09"),
        (date(2024, 2, 29), "2024-02-29"),
        (time(13, 45), "13:45:00"),
        (timedelta(minutes=90), "PT5400S"),
        (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
        (Decimal("1.10"), "1.10"),
        (b"\xff", b"\xff"),
        ((1, "a"), [1, "a"]),
        (frozenset({3}), [3]),
        (Color.RED, "red"),
        (Priority.LOW, 1),
        (Item("a", Decimal("2")), {"sku": "a", "price": "2", "qty": 1}),
        (Point(1, 2), {"x": 1, "y": 2}),
        (Pair(1, "r"), [1, "r"]),
        (float("nan"), None),  # compared separately below
    ],
)
def test_without_an_annotation_values_come_back_in_their_natural_form(
    value: object, natural: object
) -> None:
    decoded = round_trip(value)
    if natural is None:
        assert decoded != decoded  # NaN survives as NaN
        return
    assert decoded == natural
    assert type(decoded) is type(natural)


json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=30,
)


@given(json_like)
def test_json_like_values_round_trip_exactly(value: object) -> None:
    decoded = round_trip(value)
    assert decoded == value
    assert repr(decoded) == repr(value)  # no bool/int/float drift, -0.0 stays -0.0


# --- pydantic ----------------------------------------------------------------------


def test_pydantic_models_round_trip_alone_nested_and_in_lists() -> None:
    pytest.importorskip("pydantic")
    from pydantic import AnyUrl, BaseModel, ConfigDict, Field

    class Line(BaseModel):
        sku: str
        price: Decimal

    class Invoice(BaseModel):
        model_config = ConfigDict(strict=True)
        id: uuid.UUID
        issued: datetime
        lines: list[Line]
        blob: bytes
        site: AnyUrl
        customer: str = Field(alias="customerName")

    invoice = Invoice(
        id=uuid.uuid4(),
        issued=AWARE,
        lines=[Line(sku="a", price=Decimal("1.10"))],
        blob=b"\xff\x00",
        site=AnyUrl("https://example.com/x"),
        customerName="Ada",
    )
    assert round_trip(invoice, Invoice) == invoice
    assert round_trip([invoice, invoice], list[Invoice]) == [invoice, invoice]
    assert round_trip({"inv": invoice}, dict[str, Invoice]) == {"inv": invoice}
    natural = round_trip(invoice)
    assert natural["customerName"] == "Ada"
    assert natural["lines"] == [{"sku": "a", "price": "1.10"}]


def test_pydantic_validation_failures_name_the_field_inside_the_model() -> None:
    pytest.importorskip("pydantic")
    from pydantic import BaseModel

    class Line(BaseModel):
        sku: str
        price: Decimal

    data = codec.encode([{"sku": "a", "price": "1"}, {"sku": "b", "price": "lots"}])
    with pytest.raises(PayloadError) as caught:
        codec.decode(data, list[Line])
    assert caught.value.path == "$[1].price"
    assert "Line" in str(caught.value)


def test_pydantic_secrets_keep_their_value_instead_of_being_stored_masked() -> None:
    pytest.importorskip("pydantic")
    from pydantic import SecretStr

    decoded = round_trip({"token": SecretStr("hunter2")}, dict[str, SecretStr])
    assert decoded["token"].get_secret_value() == "hunter2"
    assert round_trip(SecretStr("hunter2")) == "hunter2"  # untyped: the plain value


def test_pydantic_models_with_pydantic_native_field_types_round_trip() -> None:
    pytest.importorskip("pydantic")
    from pydantic import BaseModel, HttpUrl, SecretBytes, SecretStr

    class Tier(enum.Enum):
        GOLD = "gold"
        SILVER = "silver"

    class Server(BaseModel):
        ip: ipaddress.IPv4Address
        net: ipaddress.IPv6Network
        id: uuid.UUID
        home: HttpUrl
        password: SecretStr
        key: SecretBytes
        tier: Tier
        config: pathlib.PurePosixPath

    server = Server(
        ip=ipaddress.IPv4Address("10.0.0.7"),
        net=ipaddress.IPv6Network("2001:db8::/32"),
        id=uuid.uuid4(),
        home=HttpUrl("https://example.com/a?b=1"),
        password=SecretStr("hunter2"),
        key=SecretBytes(b"\xff\x00"),
        tier=Tier.GOLD,
        config=pathlib.PurePosixPath("/etc/app.toml"),
    )
    back = round_trip(server, Server)
    assert back == server  # pydantic compares secrets by their value
    assert back.password.get_secret_value() == "hunter2"
    assert back.key.get_secret_value() == b"\xff\x00"
    assert round_trip([server], list[Server]) == [server]
    natural = round_trip(server)
    assert natural["ip"] == "10.0.0.7" and natural["home"] == "https://example.com/a?b=1"


def test_types_pydantic_serializes_work_outside_models_too() -> None:
    pytest.importorskip("pydantic")
    from pydantic import AnyUrl, HttpUrl

    url = HttpUrl("https://example.com/x")
    assert round_trip(url, HttpUrl) == url
    assert round_trip({"u": AnyUrl("s3://b/k")}, dict[str, AnyUrl]) == {"u": AnyUrl("s3://b/k")}
    sku = Sku("AB-12")  # a user type that teaches pydantic its own schema
    assert round_trip(sku, Sku) == sku
    assert round_trip(sku) == "AB-12"


class Sku:
    def __init__(self, code: str) -> None:
        self.code = code

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sku) and other.code == self.code

    def __hash__(self) -> int:
        return hash(self.code)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(
            lambda v: v if isinstance(v, Sku) else Sku(str(v)),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda s: s.code),
        )


@pytest.mark.parametrize(
    "value",
    [
        ipaddress.IPv4Address("192.0.2.1"),
        ipaddress.IPv6Address("::1"),
        ipaddress.IPv4Network("192.0.2.0/24"),
        ipaddress.IPv4Interface("192.0.2.1/24"),
        pathlib.PurePosixPath("/srv/data"),
        pathlib.Path("relative/file.txt"),
    ],
)
def test_ipaddress_and_path_values_round_trip_to_their_annotation(value: object) -> None:
    assert round_trip(value, type(value)) == value
    assert round_trip(value) == str(value)


class Money:
    def __init__(self, cents: int, currency: str) -> None:
        self.cents, self.currency = cents, currency

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and (self.cents, self.currency) == (
            other.cents,
            other.currency,
        )

    def __hash__(self) -> int:
        return hash((self.cents, self.currency))


class Euros(Money):
    pass


def _money_codec() -> DefaultPayloadCodec:
    return DefaultPayloadCodec(
        extra_types={Money: (lambda m: [m.cents, m.currency], lambda v: Money(v[0], v[1]))}
    )


def test_one_extra_type_is_registered_without_writing_a_codec() -> None:
    money = _money_codec()
    price = Money(1250, "EUR")
    assert money.decode(money.encode(price), Money) == price
    assert money.decode(money.encode({"a": [price]}), dict[str, list[Money]]) == {"a": [price]}
    assert money.decode(money.encode(Euros(5, "EUR"))) == [5, "EUR"]  # subclasses encode too
    args = encode_args(money, (price, 3))
    assert decode_args(money, args, (Money, int)) == (price, 3)

    late = DefaultPayloadCodec()
    with pytest.raises(PayloadError):
        late.encode(price)
    late.register_type(Money, encode=lambda m: f"{m.cents} {m.currency}", decode=_parse_money)
    assert late.decode(late.encode(price), Money) == price


def _parse_money(text: str) -> Money:
    cents, currency = text.split()
    return Money(int(cents), currency)


def test_a_registered_decoder_that_rejects_the_data_names_the_path() -> None:
    money = DefaultPayloadCodec(extra_types={Money: (lambda m: m.cents, _strict_money)})
    data = money.encode({"price": -1})
    with pytest.raises(PayloadError) as caught:
        money.decode(data, dict[str, Money])
    assert caught.value.path == "$[...]"  # msgspec's name for "the value of a dict entry"
    assert "negative" in str(caught.value)


def _strict_money(cents: int) -> Money:
    if cents < 0:
        raise ValueError("a price cannot be negative")
    return Money(cents, "EUR")


def test_register_type_refuses_what_is_not_a_class_or_not_callable() -> None:
    with pytest.raises(TypeError, match="needs a class"):
        DefaultPayloadCodec().register_type("Money", encode=str, decode=str)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        DefaultPayloadCodec().register_type(Money, encode=str, decode=None)  # type: ignore[arg-type]


def test_an_unencodable_value_inside_a_pydantic_model_is_located() -> None:
    pytest.importorskip("pydantic")
    from pydantic import BaseModel

    class Holder(BaseModel):
        extra: Any

    with pytest.raises(PayloadError) as caught:
        codec.encode([Holder(extra=Widget())])
    assert caught.value.path == "$[0].extra"


# --- unencodable values ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "path", "type_name"),
    [
        ({"items": [1, 2, {"price": Widget()}]}, '$["items"][2]["price"]', "Widget"),
        ([{"key": lambda: 1}], '$[0]["key"]', "function"),
        (Widget(), "$", "Widget"),
        (
            Order(1, [Item("a", Decimal(1)), Item("b", Widget())], AWARE),  # type: ignore[arg-type]
            "$.items[1].price",
            "Widget",
        ),
        ((1, (2, object())), "$[1][1]", "object"),
        (Pair(1, Widget()), "$.right", "Widget"),  # type: ignore[arg-type]
        (Point(1, Widget()), "$.y", "Widget"),  # type: ignore[arg-type]
        ({frozenset({Widget()})}, "$[0][0]", "Widget"),
        ({'we"ird': Widget()}, '$["we\\"ird"]', "Widget"),
        ({"n": [2**64]}, '$["n"][0]', "int"),
        ({"n": -(2**63) - 1}, '$["n"]', "int"),
    ],
)
def test_unencodable_values_are_reported_at_their_exact_path(
    value: object, path: str, type_name: str
) -> None:
    with pytest.raises(PayloadError) as caught:
        codec.encode(value)
    error = caught.value
    assert error.path == path
    assert error.code == "PayloadError"
    assert f"`{path}`" in str(error)
    assert type_name in str(error)
    assert error.__cause__ is not None


def test_the_unencodable_message_names_the_type_and_suggests_a_way_out() -> None:
    with socket.socket() as conn, pytest.raises(PayloadError) as caught:
        codec.encode({"conn": conn})
    message = str(caught.value)
    assert "`socket.socket`" in message
    assert "Convert it to a supported type" in message
    assert "custom PayloadCodec" in message
    assert "dataclasses" in message


def test_integers_beyond_64_bits_suggest_str_or_decimal() -> None:
    with pytest.raises(PayloadError, match=r"64 bits.*str or Decimal"):
        codec.encode(2**70)


def test_unencodable_dict_keys_are_reported_with_the_key() -> None:
    with pytest.raises(PayloadError) as caught:
        codec.encode({"cfg": {Widget(): 1}})
    assert caught.value.path.startswith('$["cfg"][<')
    assert "dict key" in str(caught.value)
    assert "Widget" in str(caught.value)


def test_reference_cycles_are_reported_where_they_close() -> None:
    loop: dict[str, Any] = {"a": [1]}
    loop["a"].append(loop)
    with pytest.raises(PayloadError, match="cycle") as caught:
        codec.encode(loop)
    assert caught.value.path == '$["a"][1]'


def test_values_nested_beyond_the_recursion_limit_fail_cleanly() -> None:
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(PayloadError, match="nested too deeply"):
        codec.encode(deep)


# --- decoding the wrong shape ------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "into", "path", "expected"),
    [
        ({"x": "a", "y": 1}, Point, "$.x", "Expected `int`, got `str`"),
        ([{"x": 1, "y": 2}, {"x": 1, "y": [1]}], list[Point], "$[1].y", "Expected `int`"),
        ({"k": {"x": 1}}, dict[str, Point], "$[...]", "missing required field `y`"),
        ("seven", int, "$", "Expected `int`, got `str`"),
        ({"sku": "a", "price": "x"}, Item, "$.price", "Invalid decimal string"),
        ([1, 2, 3], tuple[int, int], "$", "length 2"),
        ("purple", Color, "$", "Invalid enum value 'purple'"),
        ({"title": "Up"}, Movie, "$", "missing required field `year`"),
    ],
)
def test_wrong_shapes_fail_with_the_path_and_the_expected_type(
    value: object, into: object, path: str, expected: str
) -> None:
    with pytest.raises(PayloadError) as caught:
        round_trip(value, into)
    assert caught.value.path == path
    assert expected in str(caught.value)
    assert "Cannot decode the payload as" in str(caught.value)


def test_bytes_that_are_not_messagepack_fail_as_a_payload_error() -> None:
    with pytest.raises(PayloadError, match="MessagePack") as caught:
        codec.decode(b"\xc1")
    assert caught.value.path == "$"


def test_payload_size_errors_show_both_numbers_and_the_option() -> None:
    error = payload_size_error(3_145_728, 2_097_152, what="the result of activity 'charge'")
    assert str(error) == (
        "The result of activity 'charge' is 3,145,728 bytes, over the 2,097,152-byte limit "
        "(max_payload_bytes); store large data elsewhere and pass a reference (a key, URL or "
        "id) instead."
    )
    assert isinstance(error, PayloadError)


# --- call_types --------------------------------------------------------------------


async def checkout(ctx: object, order: Order, retries: int = 3) -> Item:
    raise NotImplementedError


def untyped(ctx, a, b=1):  # type: ignore[no-untyped-def]
    return a


def variadic(first: int, /, *rest: str, flag: bool = False) -> None:
    return None


def keyword_only(a: Decimal, *, b: str) -> list[Point]:
    return []


def half_broken(a: int, b: NoSuchType) -> Optional[Pair]:  # type: ignore[name-defined]  # noqa: F821, UP045
    return None


def constrained(a: Annotated[int, msgspec.Meta(ge=0)]) -> int | None:
    return a


def logged(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


class Service:
    def handle(self, point: Point) -> str:
        return ""


@pytest.mark.parametrize(
    ("fn", "skip_first", "expected"),
    [
        (checkout, True, ((Order, int), Item, False)),
        (checkout, False, ((object, Order, int), Item, False)),
        (untyped, True, ((Any, Any), Any, False)),
        (variadic, False, ((int,), type(None), True)),
        (variadic, True, ((), type(None), True)),
        (keyword_only, False, ((Decimal,), list[Point], False)),
        (half_broken, False, ((int, Any), Optional[Pair], False)),  # noqa: UP045
        (constrained, False, ((Annotated[int, msgspec.Meta(ge=0)],), int | None, False)),
        (logged(checkout), True, ((Order, int), Item, False)),
        (Service().handle, False, ((Point,), str, False)),
        (lambda ctx, x: x, True, ((Any,), Any, False)),
    ],
)
def test_call_types_reads_positional_annotations_return_type_and_varargs(
    fn: Callable[..., Any], skip_first: bool, expected: tuple[object, object, bool]
) -> None:
    assert call_types(fn, skip_first=skip_first) == expected


def test_call_types_on_something_without_a_signature_means_untyped_varargs() -> None:
    class Opaque:
        __signature__ = "not a signature"

        def __call__(self) -> None:
            return None

    assert call_types(Opaque(), skip_first=False) == ((), Any, True)


# --- argument arrays ---------------------------------------------------------------


def test_arguments_decode_each_to_its_own_annotation() -> None:
    args = (ORDER, {"raw": (1, 2)}, Decimal("1.10"))
    decoded = decode_args(codec, encode_args(codec, args), (Order, Any, Decimal))
    assert decoded == (ORDER, {"raw": [1, 2]}, Decimal("1.10"))
    assert isinstance(decoded, tuple)
    assert type(decoded[2]) is Decimal


def test_untyped_arguments_decode_in_their_natural_form() -> None:
    data = encode_args(codec, ({"a": 1}, [1, 2], "x"))
    assert decode_args(codec, data, (Any, Any)) == ({"a": 1}, [1, 2], "x")
    assert decode_args(codec, data, ()) == ({"a": 1}, [1, 2], "x")


def test_extra_arguments_beyond_the_annotations_decode_as_any() -> None:
    data = encode_args(codec, (Decimal("2"), Decimal("3"), (4, 5)))
    assert decode_args(codec, data, (Decimal,)) == (Decimal("2"), "3", [4, 5])


def test_fewer_arguments_than_annotations_are_fine() -> None:
    data = encode_args(codec, (Decimal("2"),))
    assert decode_args(codec, data, (Decimal, int, str)) == (Decimal("2"),)
    assert decode_args(codec, encode_args(codec, ()), (Decimal,)) == ()


def test_long_argument_lists_use_the_wider_array_header() -> None:
    args = tuple(Decimal(i) for i in range(70_000))
    types = (Decimal,) * 20
    decoded = decode_args(codec, encode_args(codec, args), types)
    assert decoded[:20] == args[:20]
    assert decoded[20:] == tuple(str(i) for i in range(20, 70_000))
    small = tuple(range(20))
    assert decode_args(codec, encode_args(codec, small), (int,) * 20) == small


def test_typed_varargs_of_many_different_lengths_all_decode() -> None:
    for length in range(0, 1500, 3):
        args = (Decimal("1"), *range(length))
        decoded = decode_args(codec, encode_args(codec, args), (Decimal,))
        assert decoded == args


def test_a_codec_subclass_that_overrides_decode_is_honoured_for_arguments() -> None:
    class Shouting(DefaultPayloadCodec):
        def decode(self, data: bytes, into: object = Any) -> Any:
            value = super().decode(data, into)
            return [v.upper() for v in value] if isinstance(value, list) else value

    shouting = Shouting()
    assert decode_args(shouting, encode_args(shouting, ("a", "b")), ()) == ("A", "B")


def test_argument_encode_errors_are_rooted_at_args() -> None:
    with pytest.raises(PayloadError) as caught:
        encode_args(codec, (1, {"x": Widget()}))
    assert caught.value.path == 'args[1]["x"]'
    assert '`args[1]["x"]`' in str(caught.value)


def test_argument_decode_errors_name_the_argument_and_field() -> None:
    data = encode_args(codec, (1, {"x": "one", "y": 2}))
    with pytest.raises(PayloadError) as caught:
        decode_args(codec, data, (int, Point))
    assert caught.value.path == "args[1].x"
    assert "argument 1 as `Point`" in str(caught.value)
    assert "Expected `int`, got `str`" in str(caught.value)


def test_argument_bytes_that_are_not_an_array_fail_cleanly() -> None:
    with pytest.raises(PayloadError) as caught:
        decode_args(codec, codec.encode({"not": "args"}), (int,))
    assert caught.value.path == "args"
    with pytest.raises(PayloadError, match="MessagePack"):
        decode_args(codec, b"\x91\xc1", (int,))


class JsonCodec:
    """A user's own codec, used to check the helpers stick to the protocol."""

    def encode(self, value: object) -> bytes:
        return msgspec.json.encode(value)

    def decode(self, data: bytes, into: object = Any) -> Any:
        try:
            return msgspec.json.decode(data, type=into)
        except msgspec.ValidationError as exc:
            path = str(exc).rpartition("at `")[2].rstrip("`") if " - at `" in str(exc) else "$"
            raise PayloadError(f"bad payload at `{path}`", path=path) from exc


def test_argument_helpers_work_with_a_custom_codec() -> None:
    json_codec = JsonCodec()
    data = encode_args(json_codec, (Point(1, 2), "3", [4]))
    assert decode_args(json_codec, data, (Point, Decimal)) == (Point(1, 2), Decimal("3"), [4])
    assert decode_args(json_codec, data, ()) == ({"x": 1, "y": 2}, "3", [4])
    with pytest.raises(PayloadError) as caught:
        decode_args(json_codec, data, (Point, int))
    assert caught.value.path == "args[1]"
    with pytest.raises(PayloadError) as not_array:
        decode_args(json_codec, b'{"a": 1}', (Point,))
    assert not_array.value.path == "args"
