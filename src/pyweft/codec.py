"""User payload encoding: workflow arguments, activity results, signals, updates.

Payloads are stored, so they must decode the same way after a restart, a
deploy, or on another machine: the default codec is MessagePack through
msgspec, never pickle (pickle runs code on load and breaks when a class
moves). Encoding is one msgspec call; the slow work of finding *which* part
of a value is unencodable happens only after that call has failed.

Decoding is driven by the annotations of the function that receives the
value (see :func:`call_types`), so a workflow declared ``order: Order`` gets
an ``Order`` back on replay, not a dict.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import ipaddress
import pathlib
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import msgspec

from pyweft.errors import PayloadError

_SUPPORTED = (
    "None, bool, int, float, str, bytes, list, dict, tuple, set, frozenset, datetime, date, "
    "time, timedelta, UUID, Decimal, enums, ipaddress types, paths, dataclasses, NamedTuple, "
    "TypedDict, msgspec.Struct, pydantic models and any type pydantic can serialize"
)
_AT_PATH = re.compile(r" - at `(\$[^`]*)`$")
_MAX_ARGS_DECODERS = 512
_NOISY_PREFIXES = re.compile(r"\b(?:typing|collections\.abc|builtins)\.")


class PayloadCodec(Protocol):
    """Turns user values into bytes for storage and back.

    Supply your own to ``Engine(payload_codec=...)`` to store types the
    default does not support. Both methods raise :class:`PayloadError`,
    with ``path`` naming the offending field (``$`` is the whole value).
    """

    def encode(self, value: object) -> bytes:
        """Serialize ``value``."""
        ...

    def decode(self, data: bytes, into: object = Any) -> Any:
        """Deserialize ``data``, converting it to the annotation ``into`` when given."""
        ...


EncodeType = Callable[[Any], Any]
DecodeType = Callable[[Any], Any]


class DefaultPayloadCodec:
    """MessagePack via msgspec, decoding to the receiver's annotated types.

    Encodes JSON-like values plus ``datetime``, ``date``, ``time``,
    ``timedelta``, ``UUID``, ``Decimal`` (as an exact string), ``bytes``,
    tuples, sets, frozensets, enums, ``ipaddress`` addresses, networks and
    interfaces, ``pathlib`` paths, dataclasses, ``NamedTuple``,
    ``TypedDict``, ``msgspec.Struct`` and pydantic v2 models (dumped with
    ``model_dump(mode="python", by_alias=True, round_trip=True)``, rebuilt
    with ``model_validate``). Inside and outside models, any value pydantic
    can serialize (``HttpUrl``, ``SecretStr``, ``Color``...) is stored as its
    JSON form and rebuilt by pydantic for the annotated type. Secrets are
    stored with their real value, never masked: the store holds what the
    workflow needs on replay (wrap this codec to encrypt payloads).

    One more type without writing a whole codec: ``register_type(cls,
    encode=..., decode=...)`` (or ``extra_types={cls: (encode, decode)}``),
    where ``encode`` turns an instance into an encodable value and
    ``decode`` turns that value back into an instance.

    ``decode(data, into)`` returns exactly the annotated type: ``tuple[int,
    str]`` gives a tuple, ``set[int]`` a set, ``Decimal`` a ``Decimal``,
    ``MyDataclass`` or ``list[MyModel]`` instances. An annotation msgspec
    cannot use (``Callable``, an unresolved forward reference) decodes as
    ``Any``.

    With ``into=Any`` (no annotation) the natural MessagePack value comes
    back: tz-aware datetimes stay datetimes (normalized to UTC; the same
    instant), while naive datetimes, dates, times, timedeltas, UUIDs and
    Decimals come back as ISO/canonical strings, tuples and sets as lists,
    enums as their values, and dataclasses, Structs and models as dicts.
    Integers must fit in 64 bits (signed, or unsigned up to ``2**64 - 1``).
    """

    __slots__ = ("_any_decoder", "_args_decoders", "_decoders", "_encoder", "_extra")

    def __init__(
        self, *, extra_types: Mapping[type, tuple[EncodeType, DecodeType]] | None = None
    ) -> None:
        self._extra: dict[type, tuple[EncodeType, DecodeType]] = dict(_BUILTIN_EXTRA)
        self._encoder = msgspec.msgpack.Encoder(enc_hook=self._enc_hook, decimal_format="string")
        self._any_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder()
        self._decoders: dict[object, msgspec.msgpack.Decoder[Any]] = {}
        self._args_decoders: dict[tuple[tuple[object, ...], int], msgspec.msgpack.Decoder[Any]] = {}
        for cls, (encode, decode) in (extra_types or {}).items():
            self.register_type(cls, encode=encode, decode=decode)

    def register_type(self, cls: type, *, encode: EncodeType, decode: DecodeType) -> None:
        """Store each ``cls`` (or subclass) value as ``encode(value)``; rebuild it with ``decode``.

        ``encode`` must return something this codec already encodes (a str, a
        dict...); ``decode`` receives that value as MessagePack gives it back
        (lists for tuples, strings for UUIDs) and returns a ``cls``. Register
        before the engine stores any such value, and keep the pair stable:
        stored payloads are decoded with it after every restart.
        """
        if not isinstance(cls, type):
            raise TypeError(f"register_type needs a class, got {cls!r}")
        if not callable(encode) or not callable(decode):
            raise TypeError("register_type needs callable encode= and decode= functions")
        self._extra[cls] = (encode, decode)
        self._decoders.clear()
        self._args_decoders.clear()

    def _enc_hook(self, value: Any) -> Any:
        for cls in type(value).__mro__:
            pair = self._extra.get(cls)
            if pair is not None:
                return pair[0](value)
        return _enc_hook(value)

    def _dec_hook(self, into: Any, value: Any) -> Any:
        pair = self._extra.get(into) if isinstance(into, type) else None
        if pair is not None:
            return pair[1](value)
        return _dec_hook(into, value)

    def encode(self, value: object) -> bytes:
        try:
            return self._encoder.encode(value)
        except Exception as exc:
            raise self._encode_error(value, exc) from exc

    def decode(self, data: bytes, into: object = Any) -> Any:
        decoder = self._any_decoder if into is Any else self._decoder_for(into)
        try:
            return decoder.decode(data)
        except msgspec.ValidationError as exc:
            path = _error_path(exc)
            raise PayloadError(
                f"Cannot decode the payload as `{_type_name(into)}`: {_error_detail(exc)} "
                f"at `{path}`.",
                path=path,
            ) from exc
        except msgspec.DecodeError as exc:
            if data[:4] == _FRAMED:  # compressed/encrypted by a ChainCodec: undo what needs no key
                return self.decode(_unframe(data), into)
            raise _malformed(exc) from exc

    # --- decoding helpers ---------------------------------------------------------

    def _decoder_for(self, into: object) -> msgspec.msgpack.Decoder[Any]:
        """A cached decoder per annotation; building one costs far more than a decode."""
        try:
            return self._decoders[into]
        except KeyError:
            decoder = self._build_decoder(into)
            self._decoders[into] = decoder
            return decoder
        except TypeError:  # an unhashable annotation, e.g. Annotated with a dict
            return self._build_decoder(into)

    def _build_decoder(self, into: object) -> msgspec.msgpack.Decoder[Any]:
        try:
            return msgspec.msgpack.Decoder(into, dec_hook=self._dec_hook)
        except TypeError:
            return self._any_decoder

    def _decode_args(self, data: bytes, types: tuple[object, ...]) -> tuple[object, ...]:
        """Decode the argument array with one msgspec call, whatever its length.

        Untyped signatures share one plain-tuple decoder (key length -1);
        typed ones get a fixed-length tuple decoder per array length seen.
        """
        if data[:4] == _FRAMED:
            data = _unframe(data)
        try:
            decoder = self._args_decoders.get((types, -1))
            if decoder is None:
                decoder = self._typed_args_decoder(types, _msgpack_array_length(data))
        except TypeError:  # an unhashable annotation
            decoder = self._build_args_decoder(types, _msgpack_array_length(data))
        try:
            return decoder.decode(data)  # type: ignore[no-any-return]
        except msgspec.ValidationError as exc:
            raise _args_decode_error(exc, types) from exc
        except msgspec.DecodeError as exc:
            raise _malformed(exc, root="args") from exc

    def _typed_args_decoder(
        self, types: tuple[object, ...], length: int | None
    ) -> msgspec.msgpack.Decoder[Any]:
        key = (types, -2 if length is None else length)
        decoder = self._args_decoders.get(key)
        if decoder is not None:
            return decoder
        if all(t is Any for t in types):
            key = (types, -1)
        elif len(self._args_decoders) >= _MAX_ARGS_DECODERS:  # *args of ever-new lengths
            self._args_decoders.clear()
        decoder = self._args_decoders[key] = self._build_args_decoder(types, length)
        return decoder

    def _build_args_decoder(
        self, types: tuple[object, ...], length: int | None
    ) -> msgspec.msgpack.Decoder[Any]:
        if length is None or all(t is Any for t in types):
            return msgspec.msgpack.Decoder(tuple)
        usable = [t if self._decoder_for(t) is not self._any_decoder else Any for t in types]
        padded = (usable + [Any] * length)[:length]
        try:
            return msgspec.msgpack.Decoder(tuple[tuple(padded)], dec_hook=self._dec_hook)  # type: ignore[misc]
        except TypeError:
            return msgspec.msgpack.Decoder(tuple)

    # --- encode error location --------------------------------------------------

    def _encode_error(self, value: object, exc: Exception) -> PayloadError:
        try:
            path, culprit, cause, role = self._locate(value, "$", exc, set())
        except RecursionError:
            path, culprit, cause, role = "$", value, exc, "value"
        return _unencodable(path, culprit, cause, role)

    def _locate(
        self, value: object, path: str, exc: Exception, ancestors: set[int]
    ) -> tuple[str, object, Exception, str]:
        """Descend to the innermost part of ``value`` that fails to encode on its own."""
        ancestors.add(id(value))
        if isinstance(value, dict):
            for key in value:
                try:
                    self._encoder.encode(key)
                except Exception as key_exc:
                    return path + _key_segment(key), key, key_exc, "dict key"
        for segment, child in _children(value):
            if id(child) in ancestors:
                return path + segment, child, exc, "cycle"
            try:
                self._encoder.encode(child)
            except Exception as child_exc:
                return self._locate(child, path + segment, child_exc, ancestors)
        return path, value, exc, "value"


# --- hooks ------------------------------------------------------------------------


class _ModelInvalid(ValueError):
    """A pydantic model rejected its data; ``loc`` is the path inside the model."""

    def __init__(self, message: str, loc: str) -> None:
        super().__init__(message)
        self.loc = loc


def _pydantic_base_model() -> Any:
    """pydantic's BaseModel if pydantic is loaded (else None: no value can be a model then)."""
    return getattr(sys.modules.get("pydantic"), "BaseModel", None)


def _enc_hook(value: Any) -> Any:
    base = _pydantic_base_model()
    if base is not None:
        if isinstance(value, base):
            return value.model_dump(mode="python", by_alias=True, round_trip=True)
        if hasattr(value, "get_secret_value") and type(value).__module__.startswith("pydantic"):
            return value.get_secret_value()  # stored as is: a masked secret would be lost
        try:  # URLs and the other types pydantic serializes on their own
            return sys.modules["pydantic_core"].to_jsonable_python(value)
        except Exception:
            pass
        kind: Any = type(value)
        adapter = _type_adapter(kind)  # types that bring their own pydantic schema
        if adapter is not None:
            try:
                return adapter.dump_python(value, mode="json")
            except Exception:
                pass
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


def _dec_hook(into: Any, value: Any) -> Any:
    base = _pydantic_base_model()
    if base is not None and isinstance(into, type) and issubclass(into, base):
        try:
            # Lax mode: the wire holds strings for Decimal/UUID that strict models would refuse.
            return into.model_validate(value, strict=False)  # type: ignore[attr-defined]
        except ValueError as exc:
            raise _model_invalid(into, exc) from exc
    try:  # an abstract annotation (Iterable[int], a runtime protocol) the value already meets
        if isinstance(value, typing.get_origin(into) or into):
            return value
    except TypeError:
        pass
    if base is not None and isinstance(into, type):  # a class pydantic may know (HttpUrl...)
        try:
            adapter = _type_adapter(into)
        except TypeError:  # an unhashable annotation
            adapter = None
        if adapter is not None:  # HttpUrl, SecretStr, ... : pydantic rebuilds its own types
            try:
                return adapter.validate_python(value, strict=False)
            except ValueError as exc:
                raise _model_invalid(into, exc) from exc
    raise TypeError(f"Expected `{_type_name(into)}`, got `{type(value).__name__}`")


@functools.lru_cache(maxsize=256)
def _type_adapter(into: Any) -> Any:
    """pydantic's validator for ``into``, or None when pydantic does not know the type."""
    try:
        return sys.modules["pydantic"].TypeAdapter(into)
    except Exception:  # not a type pydantic can validate
        return None


def _ip(kind: type) -> tuple[EncodeType, DecodeType]:
    return str, kind


# Common stdlib types msgspec lacks, so they work with or without pydantic installed.
_BUILTIN_EXTRA: dict[type, tuple[EncodeType, DecodeType]] = {
    kind: _ip(kind)
    for kind in (
        ipaddress.IPv4Address,
        ipaddress.IPv6Address,
        ipaddress.IPv4Network,
        ipaddress.IPv6Network,
        ipaddress.IPv4Interface,
        ipaddress.IPv6Interface,
        pathlib.PurePath,
        pathlib.Path,
        pathlib.PurePosixPath,
        pathlib.PureWindowsPath,
    )
}


def _model_invalid(model: type, exc: ValueError) -> _ModelInvalid:
    errors: list[dict[str, Any]] = getattr(exc, "errors", list)()
    if not errors:
        return _ModelInvalid(f"Invalid `{model.__qualname__}`: {exc}", "")
    first = errors[0]
    loc = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"])
    more = f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
    return _ModelInvalid(f"Invalid `{model.__qualname__}`: {first['msg']}{more}", loc)


# --- paths and messages -----------------------------------------------------------


def _children(value: object) -> Iterator[tuple[str, object]]:
    """The parts msgspec encodes inside ``value``, each with its path segment."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield _key_segment(key), item
    elif isinstance(value, tuple) and (names := getattr(type(value), "_fields", None)):
        for name, item in zip(names, value, strict=False):  # a NamedTuple
            yield f".{name}", item
    elif isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            yield f"[{index}]", item
    elif isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            yield f".{name}", getattr(value, name, None)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield f".{field.name}", getattr(value, field.name, None)
    elif (base := _pydantic_base_model()) is not None and isinstance(value, base):
        try:
            dumped = _enc_hook(value)
        except Exception:
            return
        for name, item in dumped.items():
            yield f".{name}", item


def _key_segment(key: object) -> str:
    if isinstance(key, str):
        return '["' + key.replace("\\", "\\\\").replace('"', '\\"') + '"]'
    text = repr(key)
    return f"[{text if len(text) <= 40 else text[:37] + '...'}]"


def _unencodable(path: str, culprit: object, cause: Exception, role: str) -> PayloadError:
    kind = _qualified_name(type(culprit))
    if role == "cycle":
        message = (
            f"Cannot encode the payload: the value at `{path}` contains itself (a reference "
            "cycle). Payloads are stored as trees; pass a copy without the cycle."
        )
    elif isinstance(cause, RecursionError):
        message = (
            f"Cannot encode the payload: it is nested too deeply at `{path}`. Flatten it, "
            "or store it elsewhere and pass a reference."
        )
    elif isinstance(culprit, int) and isinstance(cause, OverflowError):
        message = (
            f"Cannot encode the {role} of type `int` at `{path}`: it does not fit in 64 bits. "
            "Pass very large integers as str or Decimal."
        )
    else:
        message = (
            f"Cannot encode the {role} of type `{kind}` at `{path}` ({cause}). Convert it to a "
            f"supported type ({_SUPPORTED}), or give the engine a custom PayloadCodec."
        )
    return PayloadError(message, path=path)


def _malformed(exc: msgspec.DecodeError, *, root: str = "$") -> PayloadError:
    return PayloadError(
        f"Cannot decode the payload: {exc}. The stored bytes are not this codec's "
        "MessagePack; were they written with a different PayloadCodec?",
        path=root,
    )


def _error_path(exc: msgspec.ValidationError) -> str:
    """msgspec puts the path in the message (``... - at `$.items[0]```); recover it."""
    match = _AT_PATH.search(str(exc))
    path = match.group(1) if match else "$"
    cause = exc.__cause__
    return path + cause.loc if isinstance(cause, _ModelInvalid) else path


def _error_detail(exc: msgspec.ValidationError) -> str:
    return _AT_PATH.sub("", str(exc))


def _args_decode_error(exc: msgspec.ValidationError, types: tuple[object, ...]) -> PayloadError:
    path = _error_path(exc)
    index_match = re.match(r"\$\[(\d+)\]", path)
    rooted = "args" + path[1:]
    if index_match is None:
        message = f"Cannot decode the arguments: {_error_detail(exc)} at `{rooted}`."
    else:
        index = int(index_match.group(1))
        expected = _type_name(types[index] if index < len(types) else Any)
        message = (
            f"Cannot decode argument {index} as `{expected}`: {_error_detail(exc)} at `{rooted}`."
        )
    return PayloadError(message, path=rooted)


def _qualified_name(kind: type) -> str:
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def _type_name(annotation: object) -> str:
    if annotation is Any:
        return "Any"
    if isinstance(annotation, type) and typing.get_origin(annotation) is None:
        return annotation.__qualname__
    return _NOISY_PREFIXES.sub("", repr(annotation))


def _msgpack_array_length(data: bytes) -> int | None:
    """Read the element count from a MessagePack array header without decoding."""
    if not data:
        return None
    first = data[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F
    if first == 0xDC and len(data) >= 3:
        return int.from_bytes(data[1:3], "big")
    if first == 0xDD and len(data) >= 5:
        return int.from_bytes(data[1:5], "big")
    return None


# --- helpers the engine uses ------------------------------------------------------


_FRAMED = b"\xc1PW\x01"  # 0xC1 is never MessagePack: a frame of pyweft.codecs


def _unframe(data: bytes) -> bytes:
    from pyweft.codecs.keyless import unframe

    return unframe(data)


def payload_size_error(size: int, limit: int, *, what: str) -> PayloadError:
    """The error for a payload over ``max_payload_bytes`` (the engine checks the size)."""
    subject = what[:1].upper() + what[1:]
    return PayloadError(
        f"{subject} is {size:,} bytes, over the {limit:,}-byte limit (max_payload_bytes); "
        "store large data elsewhere and pass a reference (a key, URL or id) instead.",
        path="$",
    )


def call_types(
    fn: Callable[..., object], *, skip_first: bool
) -> tuple[tuple[object, ...], object, bool]:
    """Annotations of ``fn``'s positional parameters, its return annotation, and ``*args``.

    ``skip_first`` drops the first positional parameter (a workflow's
    context). Missing or unresolvable annotations are ``Any``, so a typo in
    a hint degrades to untyped decoding instead of failing the run.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return (), Any, True
    hints = _type_hints(fn, signature)
    positional: list[str] = []
    varargs = False
    for param in signature.parameters.values():
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            positional.append(param.name)
        elif param.kind is param.VAR_POSITIONAL:
            varargs = True
    if skip_first:
        positional = positional[1:]
    return tuple(hints.get(name, Any) for name in positional), hints.get("return", Any), varargs


def _type_hints(fn: Callable[..., object], signature: inspect.Signature) -> dict[str, object]:
    try:
        return dict(typing.get_type_hints(fn, include_extras=True))
    except Exception:
        pass
    # One bad hint must not cost the others their types: resolve them one by one.
    globalns = getattr(inspect.unwrap(fn), "__globals__", {})
    annotations = {name: p.annotation for name, p in signature.parameters.items()}
    annotations["return"] = signature.return_annotation
    hints: dict[str, object] = {}
    for name, annotation in annotations.items():
        if annotation is inspect.Parameter.empty:
            continue
        holder = types.SimpleNamespace(__annotations__={name: annotation}, __globals__=globalns)
        try:
            hints[name] = typing.get_type_hints(holder, include_extras=True)[name]
        except Exception:
            hints[name] = Any
    return hints


def encode_args(codec: PayloadCodec, args: tuple[object, ...]) -> bytes:
    """Encode positional arguments as one array; errors name the path as ``args[1].field``."""
    try:
        return codec.encode(args)
    except PayloadError as exc:
        raise _rerooted(exc) from exc.__cause__


def decode_args(codec: PayloadCodec, data: bytes, types: tuple[object, ...]) -> tuple[object, ...]:
    """Decode arguments stored by :func:`encode_args`, each to its annotation in ``types``.

    Elements beyond ``types`` (``*args``) decode as ``Any``; fewer elements
    than ``types`` (parameters left to their defaults) are fine.
    """
    if isinstance(codec, DefaultPayloadCodec) and type(codec).decode is DefaultPayloadCodec.decode:
        return codec._decode_args(data, types)
    try:
        values = codec.decode(data, Any)
        if not isinstance(values, list | tuple):
            raise PayloadError(
                f"Cannot decode the arguments: expected an array, got `{type(values).__name__}`.",
                path="$",
            )
        if all(t is Any for t in types):
            return tuple(values)
        padded = ([*types, *([Any] * len(values))])[: len(values)]
        return tuple(codec.decode(data, tuple[tuple(padded)]))  # type: ignore[misc]
    except PayloadError as exc:
        raise _rerooted(exc) from exc.__cause__


def _rerooted(exc: PayloadError) -> PayloadError:
    """The same error with its ``$`` root renamed to ``args``."""
    if not exc.path.startswith("$"):
        return exc
    path = "args" + exc.path[1:]
    return PayloadError(str(exc).replace(f"`{exc.path}`", f"`{path}`"), path=path)


__all__ = [
    "DefaultPayloadCodec",
    "PayloadCodec",
    "call_types",
    "decode_args",
    "encode_args",
    "payload_size_error",
]
