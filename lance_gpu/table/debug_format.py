# SPDX-License-Identifier: Apache-2.0
"""Rust's ``Debug`` text for Lance's metadata structures, as pylance prints them (its
``lance.debug`` dumps, ``repr`` of ``LanceSchema`` / ``LanceField``).

A structure is described by :class:`Struct` (``Name { field: value, ... }``), :class:`Tuple`
(``Name(value, ...)``) and :class:`Unit` (a bare name: ``None``, an enum variant), with
Python scalars, lists and dicts as values.  :func:`render` gives the pretty ``{:#?}`` form:
one ``field: value,`` per line indented by four spaces, the closing brace on its own line,
empty lists ``[]``, maps ``{}``; :func:`render_compact` the one-line ``{:?}`` form
(``Field { name: "a", id: 0 }``).  Strings are double-quoted with Rust's escapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lance_gpu.table.schema import LanceField, LanceSchema

__all__ = ["Struct", "Tuple", "Unit", "field_struct", "render", "render_compact", "schema_struct", "some"]


@dataclass
class Struct:
    """``name { k: v, ... }`` (a unit-like ``name`` when there are no fields)."""

    name: str
    fields: list[tuple[str, Any]]


@dataclass
class Tuple:
    """``name(v, ...)``."""

    name: str
    values: list[Any]


@dataclass
class Unit:
    """A bare name (``None``, ``Plain``, ``V2_1``)."""

    name: str


def some(value: Any) -> Any:
    """Rust's ``Option``: ``None`` for None, else ``Some(value)``."""
    return Unit("None") if value is None else Tuple("Some", [value])


def _quote(text: str) -> str:
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _scalar(value: Any) -> str | None:
    if isinstance(value, Unit):
        return value.name
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _quote(value)
    return None


def render(value: Any, depth: int = 0) -> str:
    """The pretty (``{:#?}``) form of ``value``, its first line unindented."""
    text = _scalar(value)
    if text is not None:
        return text
    pad, inner = "    " * depth, "    " * (depth + 1)
    if isinstance(value, bytes):
        return render(list(value), depth)
    if isinstance(value, Struct):
        if not value.fields:
            return value.name
        body = "".join(f"{inner}{k}: {render(v, depth + 1)},\n" for k, v in value.fields)
        return f"{value.name} {{\n{body}{pad}}}"
    if isinstance(value, Tuple):
        body = "".join(f"{inner}{render(v, depth + 1)},\n" for v in value.values)
        return f"{value.name}(\n{body}{pad})"
    if isinstance(value, dict):
        if not value:
            return "{}"
        body = "".join(f"{inner}{render(k, depth + 1)}: {render(v, depth + 1)},\n" for k, v in value.items())
        return f"{{\n{body}{pad}}}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        body = "".join(f"{inner}{render(v, depth + 1)},\n" for v in value)
        return f"[\n{body}{pad}]"
    raise TypeError(f"cannot format {type(value).__name__}")


def render_compact(value: Any) -> str:
    """The one-line (``{:?}``) form of ``value``."""
    text = _scalar(value)
    if text is not None:
        return text
    if isinstance(value, bytes):
        return render_compact(list(value))
    if isinstance(value, Struct):
        if not value.fields:
            return value.name
        return f"{value.name} {{ " + ", ".join(f"{k}: {render_compact(v)}" for k, v in value.fields) + " }"
    if isinstance(value, Tuple):
        return f"{value.name}(" + ", ".join(render_compact(v) for v in value.values) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{render_compact(k)}: {render_compact(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(render_compact(v) for v in value) + "]"
    raise TypeError(f"cannot format {type(value).__name__}")


_ENCODINGS = {1: "Plain", 2: "VarBinary", 3: "Dictionary", 4: "RLE"}


def text_map(values: dict[str, Any]) -> dict[str, str]:
    """A metadata map as Rust's ``HashMap<String, String>`` (bytes decoded as UTF-8)."""
    return {k: (bytes(v).decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)) for k, v in values.items()}


def field_struct(f: LanceField) -> Struct:
    """pylance's ``Field`` structure of one schema field and its children."""
    return Struct("Field", [
        ("name", f.name), ("id", f.id), ("parent_id", f.parent_id),
        ("logical_type", Tuple("LogicalType", [f.logical_type])),
        ("metadata", text_map(f.metadata)),
        ("encoding", some(Unit(_ENCODINGS[f.encoding]) if f.encoding in _ENCODINGS else None)),
        ("nullable", f.nullable), ("children", [field_struct(c) for c in f.children]),
        ("dictionary", some(Struct("Dictionary", [("offset", 0), ("length", 0), ("values", Unit("None"))])
                            if f.has_dictionary else None)),
        ("unenforced_primary_key_position", Unit("None")),
        ("unenforced_clustering_key_position", Unit("None")),
    ])


def schema_struct(schema: LanceSchema) -> Struct:
    """pylance's ``Schema`` structure (fields and metadata)."""
    return Struct("Schema", [("fields", [field_struct(f) for f in schema.fields]), ("metadata", text_map(schema.metadata))])
