# SPDX-License-Identifier: Apache-2.0
"""Lance schemas: ``lance.file.Field`` lists <-> ``pyarrow.Schema``.

A Lance schema is a flat list of ``lance.file.Field`` in depth-first pre-order. Each field has
an ``id``, a ``parent_id`` (-1 at top level; a parent always precedes its children) and a
``logical_type`` string. The strings pylance 14 writes:

==========================  ===============================================================
``null`` ``bool``           ``int8`` … ``uint64``, ``halffloat`` ``float`` ``double``
``string`` ``large_string`` ``binary`` ``large_binary`` (views are written as the plain types)
``decimal:{128|256}:P:S``   ``date32:day`` ``date64:ms`` ``time32:{s|ms}`` ``time64:{us|ns}``
``timestamp:UNIT:TZ``       ``TZ`` is ``-`` when absent; ``duration:UNIT``
``fixed_size_binary:N``     ``fixed_size_list:INNER:N`` (INNER is the item's type string, or
                            ``struct`` with one child field, or ``lance.bfloat16``)
``list`` ``large_list``     one child field; ``list.struct`` / ``large_list.struct`` when the
                            item is a struct
``struct``                  children are the struct fields
``map``                     child ``entries`` (non-null struct) with ``key`` and ``value``
``dict:VALUE:INDEX:false``  dictionary; ``Field.dictionary`` is present (offset/length 0)
``json``                    ``arrow.json`` stored as ``lance.json`` (JSONB in large_binary)
==========================  ===============================================================

``Field.encoding`` (legacy, still written): PLAIN=1 for fixed width (and lists, maps, FSLs),
VAR_BINARY=2 for strings, binary and json, DICTIONARY=3, NONE=0 for struct and null.
Extension types keep ``ARROW:extension:name`` / ``ARROW:extension:metadata`` in the field
metadata and the name in ``Field.extension_name``.

Data files name the columns of the fields they hold in ``DataFile.fields`` /
``DataFile.column_indices``: from 2.1 on, leaf fields only (fields with no children); in 2.0
every field, parents included (struct header and list offsets columns). Field id -2 marks a
tombstoned field and column index -1 a field without its own column.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import pyarrow as pa

from lance_gpu._proto import file_pb2, table_pb2
from lance_gpu.errors import CorruptFileError, SchemaMismatchError, UnsupportedFeatureError, UnsupportedTypeError

_T = TypeVar("_T")

__all__ = [
    "ENCODING_PLAIN",
    "ENCODING_VAR_BINARY",
    "ENCODING_DICTIONARY",
    "ENCODING_NONE",
    "LanceField",
    "LanceSchema",
    "arrow_type_to_logical",
    "column_index_map",
    "logical_to_arrow_type",
]

ENCODING_NONE = file_pb2.NONE
ENCODING_PLAIN = file_pb2.PLAIN
ENCODING_VAR_BINARY = file_pb2.VAR_BINARY
ENCODING_DICTIONARY = file_pb2.DICTIONARY

EXT_NAME_KEY = "ARROW:extension:name"
EXT_META_KEY = "ARROW:extension:metadata"
LANCE_JSON = "lance.json"
ARROW_JSON = "arrow.json"
BFLOAT16 = "lance.bfloat16"

_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "uint8": pa.uint8(),
    "int16": pa.int16(),
    "uint16": pa.uint16(),
    "int32": pa.int32(),
    "uint32": pa.uint32(),
    "int64": pa.int64(),
    "uint64": pa.uint64(),
    "halffloat": pa.float16(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "date32:day": pa.date32(),
    "date64:ms": pa.date64(),
    "time32:s": pa.time32("s"),
    "time32:ms": pa.time32("ms"),
    "time64:us": pa.time64("us"),
    "time64:ns": pa.time64("ns"),
    "duration:s": pa.duration("s"),
    "duration:ms": pa.duration("ms"),
    "duration:us": pa.duration("us"),
    "duration:ns": pa.duration("ns"),
}
_PRIMITIVE_NAMES: dict[pa.DataType, str] = {t: n for n, t in _PRIMITIVES.items()}
_PRIMITIVE_NAMES[pa.string_view()] = "string"
_PRIMITIVE_NAMES[pa.binary_view()] = "binary"
_VAR_BINARY = {"string", "large_string", "binary", "large_binary", "json"}
_TS_UNITS = {"s", "ms", "us", "ns"}


class _TypeError(ValueError):
    """Internal: a logical type string or Arrow type we cannot map."""


# --------------------------------------------------------------------------------------------
# logical type strings <-> Arrow types (scalar part; nesting is handled by the field tree)


def logical_to_arrow_type(logical: str) -> pa.DataType:
    """Arrow type of a logical type string that needs no child fields.

    Covers primitives, decimals, temporal types, ``fixed_size_binary:N``, ``dict:…`` and
    ``fixed_size_list:INNER:N`` with a non-struct INNER. Raises ValueError otherwise.
    """
    try:
        return _scalar_type(logical)
    except _TypeError as exc:
        raise ValueError(str(exc)) from None


def _scalar_type(logical: str) -> pa.DataType:
    t = _PRIMITIVES.get(logical)
    if t is not None:
        return t
    head, _, rest = logical.partition(":")
    try:
        if head == "decimal":
            bits, precision, scale = rest.split(":")
            ctor = {"32": pa.decimal32, "64": pa.decimal64, "128": pa.decimal128, "256": pa.decimal256}
            return ctor[bits](int(precision), int(scale))
        if head == "timestamp":
            unit, _, tz = rest.partition(":")
            if unit not in _TS_UNITS or not tz:
                raise _TypeError(f"bad timestamp type {logical!r}")
            return pa.timestamp(unit, None if tz == "-" else tz)
        if head == "fixed_size_binary":
            return pa.binary(int(rest))
        if head == "fixed_size_list":
            inner, _, size = rest.rpartition(":")
            if inner == "struct":
                raise _TypeError(f"{logical!r} needs its struct child field")
            return pa.list_(_fsl_item_field(inner), int(size))
        if head == "dict":
            value, index, ordered = rest.rsplit(":", 2)
            return pa.dictionary(_scalar_type(index), _scalar_type(value), ordered == "true")
    except (KeyError, ValueError) as exc:
        if isinstance(exc, _TypeError):
            raise
        raise _TypeError(f"bad logical type {logical!r}") from None
    raise _TypeError(f"unknown logical type {logical!r}")


def _fsl_item_field(inner: str) -> pa.Field:
    """Item field of a fixed-size list of a scalar type: always ``item``, nullable."""
    if inner == BFLOAT16:
        meta = {EXT_NAME_KEY: BFLOAT16, EXT_META_KEY: ""}
        return pa.field("item", pa.binary(2), True, metadata=meta)
    return pa.field("item", _scalar_type(inner), True)


def arrow_type_to_logical(t: pa.DataType) -> str:
    """Logical type string pylance writes for an Arrow type (for nested types: the parent's)."""
    return _logical(t)


def _logical(t: pa.DataType) -> str:
    if isinstance(t, pa.BaseExtensionType):
        if t.extension_name == ARROW_JSON:
            return "json"
        return _logical(t.storage_type)
    name = _PRIMITIVE_NAMES.get(t)
    if name is not None:
        return name
    if pa.types.is_decimal(t):
        if t.bit_width not in (128, 256):  # pylance 14: "Unsupported data type: Decimal64(P, S)"
            raise _TypeError(f"Unsupported data type: {t} (Lance stores decimal128 and decimal256)")
        return f"decimal:{t.bit_width}:{t.precision}:{t.scale}"
    if pa.types.is_timestamp(t):
        return f"timestamp:{t.unit}:{t.tz or '-'}"
    if pa.types.is_fixed_size_binary(t):
        return f"fixed_size_binary:{t.byte_width}"
    if pa.types.is_fixed_size_list(t):
        vt = t.value_type
        if pa.types.is_struct(vt):
            inner = "struct"
        elif isinstance(vt, pa.BaseExtensionType) and vt.extension_name == BFLOAT16:
            inner = BFLOAT16
        elif _is_nested_var(vt) or pa.types.is_dictionary(vt) or isinstance(vt, pa.BaseExtensionType):
            raise _TypeError(f"fixed_size_list of {vt} is not supported")
        else:
            inner = _logical(vt)
        return f"fixed_size_list:{inner}:{t.list_size}"
    if pa.types.is_list(t):
        return "list.struct" if pa.types.is_struct(t.value_type) else "list"
    if pa.types.is_large_list(t):
        return "large_list.struct" if pa.types.is_struct(t.value_type) else "large_list"
    if pa.types.is_map(t):
        return "map"
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_dictionary(t):
        if not (pa.types.is_integer(t.index_type)):
            raise _TypeError(f"dictionary index type {t.index_type} is not an integer")
        # pylance always records ordered=false
        return f"dict:{_logical(t.value_type)}:{_logical(t.index_type)}:false"
    raise _TypeError(f"Arrow type {t} has no Lance logical type")


class _CArrowSchema(ctypes.Structure):
    """The Arrow C data interface ``struct ArrowSchema`` (only read here)."""

    _fields_ = [
        ("format", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("metadata", ctypes.c_void_p),
        ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


def _extension_metadata(t: pa.DataType) -> bytes:
    """Serialized parameters of an extension type (``ARROW:extension:metadata``).

    Python-defined types expose ``__arrow_ext_serialize__``; for C++ types (``arrow.uuid``,
    ``arrow.fixed_shape_tensor`` …) the value is read from the C data interface export,
    whose metadata is ``i32 n, then n × (i32 key_len, key, i32 value_len, value)``.
    """
    serialize = getattr(t, "__arrow_ext_serialize__", None)
    if serialize is not None:
        return bytes(serialize())
    capsule = pa.field("x", t).__arrow_c_schema__()
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    ptr = get_pointer(capsule, b"arrow_schema")
    c_schema = _CArrowSchema.from_address(ptr)
    if not c_schema.metadata:
        return b""
    base = c_schema.metadata
    (count,) = struct.unpack("<i", ctypes.string_at(base, 4))
    pos = 4
    for _ in range(count):
        (klen,) = struct.unpack("<i", ctypes.string_at(base + pos, 4))
        key = ctypes.string_at(base + pos + 4, klen)
        pos += 4 + klen
        (vlen,) = struct.unpack("<i", ctypes.string_at(base + pos, 4))
        value = ctypes.string_at(base + pos + 4, vlen)
        pos += 4 + vlen
        if key == EXT_META_KEY.encode():
            return value
    return b""


def _is_nested_var(t: pa.DataType) -> bool:
    return (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_map(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    )


def _encoding_for(logical: str) -> int:
    if logical in _VAR_BINARY:
        return ENCODING_VAR_BINARY
    if logical.startswith("dict:"):
        return ENCODING_DICTIONARY
    if logical in ("struct", "null"):
        return ENCODING_NONE
    return ENCODING_PLAIN


# --------------------------------------------------------------------------------------------
# field tree


@dataclass
class LanceField:
    """One Lance schema field and its children (a node of the field tree)."""

    id: int
    parent_id: int
    name: str
    logical_type: str
    nullable: bool = True
    metadata: dict[str, bytes] = field(default_factory=dict)
    encoding: int = ENCODING_PLAIN
    extension_name: str = ""
    unenforced_primary_key: bool = False
    has_dictionary: bool = False
    children: list[LanceField] = field(default_factory=list)
    path: tuple[str, ...] = ()

    @property
    def is_leaf(self) -> bool:
        """True if the field has no child fields (it then owns a column in 2.1+ files)."""
        return not self.children

    @property
    def dotted_path(self) -> str:
        return ".".join(self.path)

    def walk(self) -> Iterator[LanceField]:
        """This field and its descendants, depth-first pre-order."""
        yield self
        for child in self.children:
            yield from child.walk()

    @classmethod
    def from_proto(cls, pb: file_pb2.Field) -> LanceField:
        return cls(
            id=pb.id,
            parent_id=pb.parent_id,
            name=pb.name,
            logical_type=pb.logical_type,
            nullable=pb.nullable,
            metadata=dict(pb.metadata),
            encoding=pb.encoding,
            extension_name=pb.extension_name,
            unenforced_primary_key=pb.unenforced_primary_key,
            has_dictionary=pb.HasField("dictionary"),
        )

    def to_proto(self) -> file_pb2.Field:
        """The ``lance.file.Field`` of this node alone (``type`` is always 0)."""
        pb = file_pb2.Field(
            name=self.name,
            id=self.id,
            parent_id=self.parent_id,
            logical_type=self.logical_type,
            nullable=self.nullable,
            encoding=self.encoding,  # type: ignore[arg-type]
            extension_name=self.extension_name,
            unenforced_primary_key=self.unenforced_primary_key,
        )
        for k, v in self.metadata.items():
            pb.metadata[k] = v
        if self.has_dictionary:
            pb.dictionary.SetInParent()
        return pb

    # -- Arrow -------------------------------------------------------------------------------

    def to_arrow(self, physical: bool = False) -> pa.Field:
        """Arrow field with extension markers still in the metadata (resolved by the schema)."""
        lt = self.logical_type
        meta = dict(self.metadata)
        kids = self.children
        if physical and lt == "struct" and meta.get(EXT_NAME_KEY) in (b"lance.blob.v2", "lance.blob.v2"):
            # a blob v2 field is written from its bytes (lance_gpu.file.writer.blobs)
            return pa.field(self.name, pa.large_binary(), self.nullable, metadata={b"lance-encoding:blob": b"true"})
        if lt == "json" and (self.extension_name == LANCE_JSON or meta.get(EXT_NAME_KEY) == b"lance.json"):
            if physical:
                t: pa.DataType = pa.large_binary()
            else:
                t = pa.string()
                meta[EXT_NAME_KEY] = ARROW_JSON.encode()
                meta[EXT_META_KEY] = b""
        elif lt in ("list", "list.struct", "large_list", "large_list.struct"):
            self._want_children(1)
            item = kids[0].to_arrow(physical)
            t = pa.list_(item) if lt.startswith("list") else pa.large_list(item)
        elif lt == "struct":
            t = pa.struct([c.to_arrow(physical) for c in kids])
        elif lt == "map":
            self._want_children(1)
            entries = kids[0]
            if len(entries.children) != 2:
                raise _TypeError(f"map field {self.dotted_path!r} needs key and value fields")
            key, value = (c.to_arrow(physical) for c in entries.children)
            t = pa.map_(key, value)
        elif lt.startswith("fixed_size_list:struct:"):
            self._want_children(1)
            t = pa.list_(kids[0].to_arrow(physical), int(lt.rpartition(":")[2]))
        else:
            if kids:
                raise _TypeError(f"field {self.dotted_path!r} of type {lt!r} has child fields")
            t = _scalar_type(lt)
        if self.extension_name and EXT_NAME_KEY not in meta and lt != "json":
            meta[EXT_NAME_KEY] = self.extension_name.encode()
            meta.setdefault(EXT_META_KEY, b"")
        return pa.field(self.name, t, self.nullable, metadata={k.encode(): v for k, v in meta.items()} or None)

    def _want_children(self, n: int) -> None:
        if len(self.children) != n:
            raise _TypeError(
                f"field {self.dotted_path!r} of type {self.logical_type!r} has "
                f"{len(self.children)} child fields, expected {n}"
            )


def _fields_from_arrow(
    fields: Iterable[pa.Field], parent_id: int, next_id: list[int], prefix: tuple[str, ...]
) -> list[LanceField]:
    out = []
    for f in fields:
        out.append(_field_from_arrow(f, parent_id, next_id, prefix))
    return out


def _field_from_arrow(
    f: pa.Field, parent_id: int, next_id: list[int], prefix: tuple[str, ...]
) -> LanceField:
    t = f.type
    meta = {k.decode("utf-8"): v for k, v in (f.metadata or {}).items()}
    ext_name = ""
    if isinstance(t, pa.BaseExtensionType):
        if t.extension_name == ARROW_JSON:
            ext_name = LANCE_JSON
            meta[EXT_NAME_KEY] = LANCE_JSON.encode()
            meta[EXT_META_KEY] = b""
        else:
            ext_name = t.extension_name
            meta[EXT_NAME_KEY] = ext_name.encode()
            meta[EXT_META_KEY] = _extension_metadata(t)
            t = t.storage_type
    if pa.types.is_map(t) and t.keys_sorted:
        raise _TypeError(f"map field {f.name!r} with keys_sorted=True is not supported")
    logical = _logical(t) if not ext_name == LANCE_JSON else "json"
    node = LanceField(
        id=next_id[0],
        parent_id=parent_id,
        name=f.name,
        logical_type=logical,
        nullable=f.nullable,
        metadata=meta,
        encoding=_encoding_for(logical),
        extension_name=ext_name,
        has_dictionary=logical.startswith("dict:"),
        path=(*prefix, f.name),
    )
    next_id[0] += 1
    if pa.types.is_struct(t):
        node.children = _fields_from_arrow(list(t), node.id, next_id, node.path)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        node.children = [_field_from_arrow(t.value_field, node.id, next_id, node.path)]
    elif pa.types.is_fixed_size_list(t) and pa.types.is_struct(t.value_type):
        node.children = [_field_from_arrow(t.value_field, node.id, next_id, node.path)]
    elif pa.types.is_map(t):
        entries = LanceField(
            id=next_id[0],
            parent_id=node.id,
            name="entries",
            logical_type="struct",
            nullable=False,
            encoding=ENCODING_NONE,
            path=(*node.path, "entries"),
        )
        next_id[0] += 1
        entries.children = _fields_from_arrow(
            [t.key_field, t.item_field], entries.id, next_id, entries.path
        )
        node.children = [entries]
    return node


# --------------------------------------------------------------------------------------------
# schema


#: :meth:`LanceSchema.from_manifest`'s field trees, by the manifest fields' bytes and the
#: schema metadata; emptied when it holds :data:`MANIFEST_SCHEMAS_KEPT` of them.
MANIFEST_SCHEMAS: dict[tuple[tuple[bytes, ...], tuple[tuple[str, bytes], ...]], LanceSchema] = {}
MANIFEST_SCHEMAS_KEPT = 64


class LanceSchema:
    """A Lance schema: the field tree, id lookup, leaf order and projection.

    ``source`` (a file path, optional) is named in errors.
    """

    def __init__(
        self,
        fields: Sequence[LanceField],
        metadata: Mapping[str, bytes] | None = None,
        source: str | os.PathLike[str] = "<schema>",
    ) -> None:
        self.fields: list[LanceField] = list(fields)
        self.metadata: dict[str, bytes] = dict(metadata or {})
        self.source = os.fspath(source)
        self.by_id: dict[int, LanceField] = {}
        for f in self.walk():
            if f.id in self.by_id:
                raise CorruptFileError(self.source, f"duplicate field id {f.id}")
            self.by_id[f.id] = f
        #: What is derived from the fields and metadata alone (:meth:`to_arrow`'s schemas by
        #: ``physical``, :meth:`file_schema_bytes`), shared by the schemas of one field tree
        #: that :meth:`from_manifest` hands out
        self._derived: dict[object, Any] = {}

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_protos(
        cls,
        pb_fields: Iterable[file_pb2.Field],
        metadata: Mapping[str, bytes] | None = None,
        source: str | os.PathLike[str] = "<schema>",
    ) -> LanceSchema:
        """Build the tree from a flat field list (parents must precede their children)."""
        source = os.fspath(source)
        top: list[LanceField] = []
        nodes: dict[int, LanceField] = {}
        for pb in pb_fields:
            node = LanceField.from_proto(pb)
            if node.id in nodes:
                raise CorruptFileError(source, f"duplicate field id {node.id} ({node.name!r})")
            if node.parent_id < 0:
                node.path = (node.name,)
                top.append(node)
            else:
                parent = nodes.get(node.parent_id)
                if parent is None:
                    raise CorruptFileError(
                        source,
                        f"field {node.name!r} (id {node.id}) names parent {node.parent_id}, "
                        "which does not precede it",
                    )
                node.path = (*parent.path, node.name)
                parent.children.append(node)
            nodes[node.id] = node
        return cls(top, metadata, source)

    @classmethod
    def from_manifest(
        cls, manifest: table_pb2.Manifest, source: str | os.PathLike[str] = "<manifest>"
    ) -> LanceSchema:
        """Schema of a manifest (fields 1 and 5).

        The field tree of a schema this process read before is shared, not built again
        (:data:`MANIFEST_SCHEMAS`: every version of a dataset, and every commit's new
        version, carries the same fields): the returned schema is a new object naming
        ``source``, its fields (never modified once built: changes make new ones,
        ``dataclasses.replace``) and :meth:`to_arrow`'s schemas those of the first."""
        fields = manifest.fields
        metadata = dict(manifest.schema_metadata)
        # the fields' bytes, serialised deterministically (map entries -- field metadata --
        # in key order: equal fields give equal bytes whatever order their maps were filled
        # or copied in; protobuf's default order is its hash table's, which a copied message
        # may not share): equal bytes are equal fields
        key = (tuple(pb.SerializeToString(deterministic=True) for pb in fields), tuple(sorted(metadata.items())))
        built = MANIFEST_SCHEMAS.get(key)
        if built is None:
            built = cls.from_protos(fields, metadata, source)
            if len(MANIFEST_SCHEMAS) >= MANIFEST_SCHEMAS_KEPT:
                MANIFEST_SCHEMAS.clear()
            MANIFEST_SCHEMAS[key] = built
            return built._sharing(source)
        return built._sharing(source)

    def _sharing(self, source: str | os.PathLike[str]) -> LanceSchema:
        """A schema of the same field tree (shared), metadata (copied) and :meth:`to_arrow`
        cache (shared), naming ``source``."""
        out = object.__new__(type(self))
        out.fields = list(self.fields)
        out.metadata = dict(self.metadata)
        out.source = os.fspath(source)
        out.by_id = dict(self.by_id)
        out._derived = self._derived
        return out

    @classmethod
    def from_arrow(cls, schema: pa.Schema, start_id: int = 0) -> LanceSchema:
        """Lance fields for an Arrow schema, with fresh ids from ``start_id``, depth-first,
        logical types, encodings and metadata as pylance 14 writes them.

        Raises :class:`UnsupportedTypeError` (an ``UnsupportedFeatureError`` and, as
        pylance's, an ``OSError``) for types Lance cannot store.
        """
        try:
            fields = _fields_from_arrow(schema, -1, [start_id], ())
        except _TypeError as exc:
            raise UnsupportedTypeError(str(exc)) from None
        meta = {k.decode("utf-8"): v for k, v in (schema.metadata or {}).items()}
        return cls(fields, meta)

    # -- access ------------------------------------------------------------------------------

    def walk(self) -> Iterator[LanceField]:
        """Every field, depth-first pre-order (the order of the flat protobuf list)."""
        for f in self.fields:
            yield from f.walk()

    @property
    def field_ids(self) -> list[int]:
        return [f.id for f in self.walk()]

    @property
    def leaf_ids(self) -> list[int]:
        """Ids of fields without children, depth-first: the column order of 2.1+ files."""
        return [f.id for f in self.walk() if f.is_leaf]

    @property
    def max_field_id(self) -> int:
        return max(self.by_id, default=-1)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def __len__(self) -> int:
        return len(self.fields)

    def __repr__(self) -> str:
        return f"LanceSchema({self.to_arrow()!s})"

    def field(self, path: str | Sequence[str]) -> LanceField:
        """Field by top-level name, dotted path (``"st.a"``) or a sequence of names."""
        chain = self._resolve(path)
        return chain[-1]

    def _resolve(self, path: str | Sequence[str]) -> list[LanceField]:
        if isinstance(path, str):
            for f in self.fields:  # a top-level name may itself contain dots
                if f.name == path:
                    return [f]
            parts: Sequence[str] = path.split(".")
        else:
            parts = list(path)
        level = self.fields
        chain: list[LanceField] = []
        i = 0
        while i < len(parts):
            # longest match first, so names containing dots still resolve
            for j in range(len(parts), i, -1):
                name = ".".join(parts[i:j])
                hit = next((f for f in level if f.name == name), None)
                if hit is not None:
                    chain.append(hit)
                    level = hit.children
                    i = j
                    break
            else:
                raise SchemaMismatchError(
                    f"{self.source}: no column {'.'.join(parts)!r} in schema "
                    f"(top-level columns: {', '.join(self.names)})"
                )
        return chain

    def project(self, columns: Iterable[str | Sequence[str]]) -> LanceSchema:
        """Sub-schema holding the named columns (top-level names or dotted nested paths).

        Top-level order follows the first mention; a nested path keeps only the named
        children of its structs (within a list or map the whole item is kept). Ids are kept.
        """
        picks: dict[int, dict | None] = {}  # field id -> {child id -> ...} or None = whole
        order: list[int] = []
        for col in columns:
            chain = self._resolve(col)
            # stop at the first non-struct ancestor: lists and maps are taken whole
            cut = len(chain)
            for k, f in enumerate(chain[:-1]):
                if f.logical_type != "struct":
                    cut = k + 1
                    break
            chain = chain[:cut]
            level = picks
            if chain[0].id not in picks:
                order.append(chain[0].id)
            for k, f in enumerate(chain):
                last = k == len(chain) - 1
                if last:
                    level[f.id] = None
                    break
                sub = level.get(f.id, {})
                if sub is None:  # already whole
                    break
                level[f.id] = sub
                level = sub

        def prune(f: LanceField, sel: dict | None) -> LanceField:
            if sel is None:
                return f
            kids = [prune(c, sel[c.id]) for c in f.children if c.id in sel]
            return replace(f, children=kids)

        fields = [prune(self.by_id[i], picks[i]) for i in order]
        return LanceSchema(fields, self.metadata, self.source)

    # -- conversion --------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        """Equal field trees (names, ids, types, nullability, metadata) and schema metadata."""
        if not isinstance(other, LanceSchema):
            return NotImplemented
        return self.to_protos() == other.to_protos() and self.metadata == other.metadata

    __hash__ = None  # type: ignore[assignment]

    def to_protos(self) -> list[file_pb2.Field]:
        """The flat ``lance.file.Field`` list, depth-first."""
        return [f.to_proto() for f in self.walk()]

    def to_arrow(self, physical: bool = False) -> pa.Schema:
        """The Arrow schema, as pylance's ``Dataset.schema`` shows it.

        Extension types (``arrow.uuid``, ``arrow.json``, ``lance.bfloat16`` …) are rebuilt if
        registered with pyarrow; otherwise the storage type is kept with the
        ``ARROW:extension:*`` metadata. ``physical=True`` gives the types writers take: json
        columns their stored type (large_binary, JSONB) instead of ``arrow.json``, blob v2
        fields ``large_binary`` marked ``lance-encoding:blob`` (their bytes).
        """
        kept = self._derived.get(physical)
        if kept is not None:
            return kept
        try:
            fields = [f.to_arrow(physical) for f in self.fields]
        except (_TypeError, ValueError) as exc:
            raise UnsupportedFeatureError(f"{self.source}: {exc}") from None
        meta = {k.encode(): v for k, v in self.metadata.items()} or None
        schema = pa.schema(fields, metadata=meta)
        if _has_extension_markers(schema):
            # the IPC reader instantiates every registered extension type, at any depth (the
            # types registered now: not kept, a type may be registered later)
            return pa.ipc.read_schema(pa.py_buffer(schema.serialize()))
        self._derived[physical] = schema  # (an Arrow schema is immutable)
        return schema

    def file_schema_bytes(self) -> bytes:
        """A data file's ``FileDescriptor`` holding only this schema (``lance.file.Schema``:
        :meth:`to_protos` and the metadata), serialized; a descriptor's bytes are these
        followed by those of ``FileDescriptor(length=rows)`` (fields in number order, as
        serializing the whole message gives them)."""
        return self.derived("file schema", self._file_schema_bytes)

    def _file_schema_bytes(self) -> bytes:
        schema = file_pb2.Schema(fields=self.to_protos(), metadata=self.metadata)
        return file_pb2.FileDescriptor(schema=schema).SerializeToString()

    def derived(self, key: object, make: Callable[[], _T]) -> _T:
        """``make()``, a value that depends on the fields and metadata alone, made once per
        field tree: kept under ``key`` (a name the caller owns, e.g. ``("file columns",
        minor)``) with :meth:`to_arrow`'s schemas, shared by every schema of the tree
        :meth:`from_manifest` hands out (each small write asks again).  What it returns is
        shared: callers never modify it.  A ``make`` that raises keeps nothing (asked again,
        it raises again)."""
        try:
            return self._derived[key]  # type: ignore[no-any-return]
        except KeyError:
            value = self._derived[key] = make()
            return value


def _has_extension_markers(schema: pa.Schema) -> bool:
    return any(_field_has_extension_marker(f) for f in schema)


def _field_has_extension_marker(f: pa.Field) -> bool:
    """Whether ``f`` or a field inside it carries an extension type name (a module-level
    recursion: a recursive closure would leave a reference cycle per call)."""
    if f.metadata and EXT_NAME_KEY.encode() in f.metadata:
        return True
    t = f.type
    return any(_field_has_extension_marker(t.field(i)) for i in range(t.num_fields))


# --------------------------------------------------------------------------------------------
# data file columns


def column_index_map(
    data_file: table_pb2.DataFile, schema: LanceSchema | None = None
) -> dict[int, int]:
    """Field id -> column index of one data file, from ``DataFile.fields`` / ``column_indices``.

    Tombstoned fields (id < 0) and fields without a column (index -1) are left out; with a
    ``schema``, so are fields not in it (e.g. dropped columns). An empty ``column_indices``
    (legacy v1 files) means the column index is the position in ``fields``.
    Raises :class:`CorruptFileError` naming the data file on inconsistent lists.
    """
    ids = list(data_file.fields)
    cols = list(data_file.column_indices)
    if not cols:
        cols = list(range(len(ids)))
    elif len(cols) != len(ids):
        raise CorruptFileError(
            data_file.path,
            f"data file lists {len(ids)} fields but {len(cols)} column indices",
        )
    out: dict[int, int] = {}
    used: set[int] = set()
    for fid, col in zip(ids, cols, strict=True):
        if fid < 0 or col < 0:
            continue
        if fid in out:
            raise CorruptFileError(data_file.path, f"field id {fid} is listed twice")
        if col in used:
            raise CorruptFileError(data_file.path, f"column index {col} is listed twice")
        used.add(col)
        if schema is not None and fid not in schema.by_id:
            continue
        out[fid] = col
    return out
