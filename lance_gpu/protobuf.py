# SPDX-License-Identifier: Apache-2.0
"""Strict protobuf parsing: a known field with the wrong wire type is corruption.

Python protobuf (upb) files a field whose number the message knows but whose wire type
does not match its declaration (a varint where a length-delimited message belongs, a
flipped tag byte) among the message's *unknown fields* and parses on: the field then reads
as its default (0, empty, missing) and data silently disappears.  pylance (prost) refuses
such bytes.  :func:`parse_strict` parses, then walks the message tree and refuses any
unknown field whose number is declared by its message.  Unknown field numbers that the
message does not declare stay allowed (newer writers may add fields).
"""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from lance_gpu.errors import CorruptFileError

__all__ = ["canonical_without_unknowns", "check_strict", "has_unknown_fields", "misplaced_fields", "parse_strict"]

M = TypeVar("M", bound=Message)

_WIRE_NAMES = {0: "varint", 1: "fixed64", 2: "length-delimited", 3: "start-group", 4: "end-group", 5: "fixed32"}


def misplaced_fields(msg: Message, where: str = "") -> list[str]:
    """Declared fields of ``msg`` (and of every sub-message) that arrived with a wrong wire
    type, as ``"Message.field (wire type ...)"`` descriptions."""
    out: list[str] = []
    desc = msg.DESCRIPTOR
    name = where or desc.name
    known = desc.fields_by_number
    try:
        unknown = UnknownFieldSet(msg)
    except (TypeError, ValueError):  # pragma: no cover - messages without unknown-field support
        unknown = ()
    for uf in unknown:
        fd = known.get(uf.field_number)
        if fd is not None:
            out.append(f"{name}.{fd.name} (field {uf.field_number}, wire type {_WIRE_NAMES.get(uf.wire_type, uf.wire_type)})")
    for fd, value in msg.ListFields():
        if fd.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        sub = f"{name}.{fd.name}"
        if fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            if value_fd.type == FieldDescriptor.TYPE_MESSAGE:
                for item in value.values():
                    out.extend(misplaced_fields(item, sub))
        elif fd.is_repeated:
            for item in value:
                out.extend(misplaced_fields(item, sub))
        else:
            out.extend(misplaced_fields(value, sub))
    return out


def has_unknown_fields(msg: Message) -> bool:
    """Whether ``msg`` or any sub-message holds unknown fields (C-speed: a copy without
    them serialises shorter)."""
    bare = type(msg)()
    bare.CopyFrom(msg)
    bare.DiscardUnknownFields()
    return bare.ByteSize() != msg.ByteSize()


def check_strict(msg: Message, path: object, what: str) -> None:
    """Raise :class:`CorruptFileError` naming ``path`` if ``msg`` holds a misplaced field."""
    if not has_unknown_fields(msg):
        return
    bad = misplaced_fields(msg)
    if bad:
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise CorruptFileError(path, f"{what}: field with the wrong wire type: {', '.join(bad[:3])}{more}")


def parse_strict(cls: type[M], data: bytes, path: object, what: str) -> M:
    """Parse ``data`` as ``cls`` strictly; any failure is a :class:`CorruptFileError`."""
    msg = cls()
    try:
        msg.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise CorruptFileError(path, f"{what} is not valid protobuf ({exc})") from exc
    if not canonical_without_unknowns(cls, data):
        check_strict(msg, path, what)
    return msg


def canonical_without_unknowns(cls: type[Message], data: bytes) -> bool:
    """Whether ``data`` is exactly the serialization of its known fields (then the message
    parsed from it holds no unknown field, misplaced or not): a second copy, its unknown
    fields dropped, serialises back to ``data``.  All C speed, cheaper than copying the
    parsed message to compare sizes (:func:`has_unknown_fields`); a writer's other field
    order or encoding answers ``False`` and takes the full check."""
    bare = cls()
    try:
        bare.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError):
        return False
    bare.DiscardUnknownFields()
    return bool(bare.SerializeToString() == data)
