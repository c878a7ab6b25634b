"""Dataclasses as plain JSON data and back (the disk cache of summaries.py): a dataclass is a
JSON list of its fields in order (summaries.SUMMARY_VERSION changes with them), a tuple a list, a
dict an object, a frozenset a sorted list; each type's encoder and decoder is built once from its
annotations."""

from __future__ import annotations

import types
import typing
from dataclasses import fields, is_dataclass


_CODECS: dict[object, tuple[typing.Callable[[object], object], typing.Callable[[object], object]]] = {}


def encode(value: object, kind: object = None) -> object:
    """Plain JSON data for a value of one of the summaries' types (``kind``: its declared type,
    by default its class)."""
    return _codec(type(value) if kind is None else kind)[0](value)


def decode(kind: object, data: object) -> object:
    """The inverse of ``encode``; data of the wrong shape raises TypeError."""
    return _codec(kind)[1](data)


def _same(value: object) -> object:
    return value


def _codec(kind: object) -> tuple[typing.Callable[[object], object], typing.Callable[[object], object]]:
    """The encoder and the decoder of a declared type."""
    found = _CODECS.get(kind)
    if found is not None:
        return found
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin is tuple:
        encode_item, decode_item = _codec(arguments[0])
        found = (list if encode_item is _same else lambda value: [encode_item(item) for item in value],
                 lambda data: tuple(decode_item(item) for item in checked(data, list)))
    elif origin is dict:
        encode_item, decode_item = _codec(arguments[1])
        found = (_same if encode_item is _same else lambda value: {k: encode_item(v) for k, v in value.items()},
                 lambda data: {checked(k, str): decode_item(v) for k, v in checked(data, dict).items()})
    elif origin is frozenset:
        found = (sorted, lambda data: frozenset(checked(item, str) for item in checked(data, list)))
    elif origin in (typing.Union, types.UnionType):
        encode_item, decode_item = _codec(next(option for option in arguments if option is not type(None)))
        found = (_same if encode_item is _same else lambda value: None if value is None else encode_item(value),
                 lambda data: None if data is None else decode_item(data))
    elif isinstance(kind, type) and is_dataclass(kind):
        parts: list = []  # filled below: a dataclass may hold itself (Effect.via)

        def decode_fields(data: object) -> object:
            if type(data) is not list or len(data) != len(parts):
                raise TypeError(f"expected {len(parts)} fields for {kind.__name__}")
            return kind(*[decode_part(value) for (_, _, decode_part), value in zip(parts, data)])
        found = _CODECS[kind] = (
            lambda value: [encode_part(getattr(value, name)) for name, encode_part, _ in parts], decode_fields)
        parts += [(f.name, *_codec(hint)) for f, hint in zip(fields(kind), _hints(kind))]
    elif kind in (str, int, bool):
        found = (_same, lambda data: checked(data, kind))
    else:
        raise TypeError(f"no JSON form for {kind!r}")
    _CODECS[kind] = found
    return found


def _hints(kind: type) -> list[object]:
    hints = typing.get_type_hints(kind)
    return [hints[f.name] for f in fields(kind)]


def checked(data: object, kind: type) -> object:
    if type(data) is not kind:
        raise TypeError(f"expected {kind.__name__}, got {type(data).__name__}")
    return data
