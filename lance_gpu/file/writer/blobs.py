# SPDX-License-Identifier: Apache-2.0
"""Writing blob columns as pylance 14 writes them (see :mod:`lance_gpu.table.blobs` for the
descriptors a reader sees).

A blob field is a top-level ``large_binary`` (or ``binary``) field marked with the field
metadata ``lance-encoding:blob = "true"``.  Its bytes go into the data file itself, each
non-empty value at the next 64-byte boundary, written when the field's page is flushed
(before the page's own buffers); the column holds one descriptor per row:

* File version 2.0 (blob v1): the column's ``ColumnEncoding`` is ``blob{inner: values{}}``,
  each page a ``PackedStruct{inner: [Nullable{no_nulls{Flat{64}}}] * 2}`` over one buffer of
  16-byte rows ``u64 LE position | u64 LE size``; an empty value is ``(0, 0)``, a null one
  ``(1, 0)``.
* File version 2.1 (blob v1): the Lance field stays ``large_binary`` with the blob flag.
  The page is ``BlobLayout{inner: MiniBlockLayout{PackedStruct{64, 64}(Flat{128}),
  ALL_VALID_ITEM}, layers: [ALL_VALID_ITEM | NULLABLE_ITEM]}`` over 16-byte rows ``u64 LE
  position | u64 LE size``; an empty value is ``(0, 0)``, a null one ``(65536, 0)``.
* File version 2.2 (blob v2): the Lance field becomes a struct marked ``ARROW:extension:name
  = lance.blob.v2`` with children ``data: large_binary`` and ``uri: string`` (the blob flag
  dropped; the struct owns the one column, its children none).  The page is a
  ``FullZipLayout`` of ``VariablePackedStruct`` rows ``u8 kind | u64 position | u64 size |
  u32 blob_id | u32 uri length | uri`` (little-endian; here always kind 0 "inline",
  blob_id 0, no uri; an empty value's position is the aligned cursor), a null row a null
  item; a page of only nulls is the all-null ``ConstantLayout``.  pylance 14 moves values
  over 64 KiB to a separate ``.blob`` file (kind 1); lance-gpu keeps every value inline,
  which pylance reads the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from lance_gpu._proto import encodings_v2_0_pb2 as pb20
from lance_gpu._proto import encodings_v2_1_pb2 as pb
from lance_gpu.errors import UnsupportedFeatureError
from lance_gpu.file.encodings import _native
from lance_gpu.file.page import ALL_VALID_ITEM, NULLABLE_ITEM
from lance_gpu.file.writer.pages import EncodedPage, _fullzip, _miniblock, _simple_all_null, _value_chunks, _values_of
from lance_gpu.file.writer.shred import LeafColumn
from lance_gpu.table.blob_descriptions import BLOB_META_KEY, BLOB_V2, blob_kind
from lance_gpu.table.packed import PACKED_META_KEYS, is_packed_metadata, packed_struct
from lance_gpu.table.schema import LanceField, LanceSchema

if TYPE_CHECKING:
    from lance_gpu.file.writer.pages import EncodedPage

__all__ = ["V1_NULL_POSITION", "V2_0_NULL_POSITION", "blob_v2_schema", "column_field_ids", "encode_blob_page", "is_blob_input", "v2_0_blob_column_encoding"]

#: The position pylance 14 stores in the v1 descriptor of a null blob (its size is 0).
V1_NULL_POSITION = 65536
#: The position of a null blob in a 2.0 file (its size is 0).
V2_0_NULL_POSITION = 1
_ALIGN = 64
_EXT_NAME = b"ARROW:extension:name"
_V2_STORAGE = pa.struct([pa.field("data", pa.large_binary()), pa.field("uri", pa.string())])


def is_blob_input(field: pa.Field) -> bool:
    """Is ``field`` a blob field as users write it (binary data marked ``lance-encoding:blob``)?"""
    meta = field.metadata or {}
    t = field.type
    return meta.get(BLOB_META_KEY.encode()) == b"true" and (pa.types.is_large_binary(t) or pa.types.is_binary(t))


def blob_v2_schema(schema: pa.Schema, minor: int) -> pa.Schema:
    """The Arrow schema whose Lance schema pylance stores for ``schema`` at file version
    2.``minor``: at 2.2 each blob field becomes the ``lance.blob.v2`` struct (its data keeps
    arriving as binary); at 2.1 nothing changes.  Nested blob fields are refused.

    One difference from pylance: lance-gpu writes structs unpacked, so a struct's
    ``lance-encoding:packed`` flag (:mod:`lance_gpu.table.packed`) is dropped -- kept, it
    would tell readers to look for the one packed column the files do not have."""

    def nested_blob(t: pa.DataType) -> bool:
        return any(is_blob_input(t.field(i)) or nested_blob(t.field(i).type) for i in range(t.num_fields))

    fields = []
    for f in schema:
        if nested_blob(f.type):
            raise UnsupportedFeatureError(f"field {f.name!r}: blob fields inside other fields cannot be written")
        if minor >= 2 and is_blob_input(f):
            meta = {k: v for k, v in (f.metadata or {}).items() if k != BLOB_META_KEY.encode()}
            meta[_EXT_NAME] = BLOB_V2.encode()
            f = pa.field(f.name, _V2_STORAGE, f.nullable, metadata=meta)
        fields.append(_unpacked(f))
    return pa.schema(fields, metadata=schema.metadata)


def _unpacked(f: pa.Field) -> pa.Field:
    """``f`` without the packed flag on any struct in it (lance-gpu writes structs unpacked)."""
    t = f.type
    if not pa.types.is_struct(t) or is_blob_input(f):
        return f
    children = [_unpacked(t.field(i)) for i in range(t.num_fields)]
    meta = f.metadata
    if is_packed_metadata(meta):
        meta = {k: v for k, v in meta.items() if k.decode() not in PACKED_META_KEYS} or None
    return pa.field(f.name, pa.struct(children), f.nullable, metadata=meta)


def column_field_ids(schema: LanceSchema, minor: int = 2) -> list[int]:
    """Ids of the fields that own a column in a data file of version 2.``minor``, in column
    order: in 2.0 every field, depth-first; in 2.1+ the leaves, except that a blob v2 struct
    owns one column and its children none.

    A schema with a packed struct (a dataset pylance wrote so) is refused: lance-gpu writes
    structs unpacked, and files of unpacked columns under a packed schema would read wrong."""
    for f in schema.walk():
        if packed_struct(f):
            raise UnsupportedFeatureError(
                f"field {f.name!r} is a packed struct (lance-encoding:packed): lance-gpu does not write packed structs"
            )
    if minor == 0:
        return [f.id for f in schema.walk()]
    out: list[int] = []
    for top in schema.fields:
        _column_owners(top, out)
    return out


def _column_owners(f: LanceField, out: list[int]) -> None:
    """Append the ids of the fields in ``f`` that own a column in a 2.1+ file (module level:
    a recursive closure would leave a reference cycle per call)."""
    if blob_kind(f) == 2 or f.is_leaf:
        out.append(f.id)
        return
    for child in f.children:
        _column_owners(child, out)


def blob_values(arr: pa.Array) -> pa.Array:
    """The binary values of a blob field's array (a ``large_binary`` / ``binary`` array)."""
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    if pa.types.is_binary(arr.type):
        arr = arr.cast(pa.large_binary())
    if not pa.types.is_large_binary(arr.type):
        raise UnsupportedFeatureError(f"blob data of type {arr.type} cannot be written (large_binary expected)")
    return arr


def encode_blob_page(
    arr: pa.Array, field: LanceField, minor: int, write: Callable[[np.ndarray], int]
) -> EncodedPage:
    """Write the values of ``arr`` through ``write`` (which puts bytes at the next 64-byte
    boundary of the file and returns their offset) and return the descriptor page."""

    arr = blob_values(arr)
    n = len(arr)
    valid = arr.is_valid().to_numpy(zero_copy_only=False) if arr.null_count else np.ones(n, np.bool_)
    offsets = np.frombuffer(arr.buffers()[1], np.int64, n + 1, 8 * arr.offset)
    sizes = np.where(valid, np.diff(offsets), 0).astype(np.int64)
    padded = (sizes + _ALIGN - 1) // _ALIGN * _ALIGN
    rel = np.zeros(n, np.int64)
    np.cumsum(padded[:-1], out=rel[1:])
    base = 0
    if int(sizes.sum()):
        data = arr.buffers()[2]
        raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
        out = np.zeros(int(padded.sum()), np.uint8)
        _native.scatter_ranges(out, rel, raw, offsets[:-1].astype(np.int64), sizes)
        base = write(out)
    positions = (rel + base).astype(np.uint64)
    nulls = ~valid
    if minor >= 2:
        return _v2_page(field, positions, sizes, nulls)
    if minor == 0:
        positions[(sizes == 0) & valid] = 0
        positions[nulls] = V2_0_NULL_POSITION
        return _v2_0_page(positions, sizes)
    positions[(sizes == 0) & valid] = 0
    positions[nulls] = V1_NULL_POSITION
    return _v1_page(field, positions, sizes, nulls)


def _v1_page(field: LanceField, positions: np.ndarray, sizes: np.ndarray, nulls: np.ndarray) -> EncodedPage:

    n = positions.size
    rows = np.empty((n, 2), "<u8")
    rows[:, 0] = positions
    rows[:, 1] = sizes
    values = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), n, [None, pa.py_buffer(rows.tobytes())])
    leaf = LeafColumn(field, values, None, None, (ALL_VALID_ITEM,), n, n)
    inner = _miniblock(leaf, 1, _value_chunks(_values_of(values), "none"))
    mb = inner.layout.mini_block_layout
    mb.value_compression.CopyFrom(
        pb.CompressiveEncoding(packed_struct=pb.PackedStruct(bits_per_value=[64, 64], values=mb.value_compression))
    )
    outer = NULLABLE_ITEM if nulls.any() else ALL_VALID_ITEM
    layout = pb.PageLayout(blob_layout=pb.BlobLayout(inner_layout=inner.layout, layers=[outer]))  # type: ignore[list-item]
    return EncodedPage(layout, inner.buffers, n)


def _v2_0_page(positions: np.ndarray, sizes: np.ndarray) -> EncodedPage:

    rows = np.empty((positions.size, 2), "<u8")
    rows[:, 0] = positions
    rows[:, 1] = sizes
    u64 = pb20.ArrayEncoding(nullable=pb20.Nullable(no_nulls=pb20.Nullable.NoNull(values=pb20.ArrayEncoding(
        flat=pb20.Flat(bits_per_value=64, buffer=pb20.Buffer(buffer_index=0, buffer_type=pb20.Buffer.page))))))
    packed = pb20.PackedStruct(inner=[u64, u64], buffer=pb20.Buffer(buffer_index=0, buffer_type=pb20.Buffer.page))
    enc = pb20.ArrayEncoding(packed_struct=packed)
    return EncodedPage(enc, [rows.view(np.uint8).reshape(-1)], positions.size)  # type: ignore[arg-type]


def v2_0_blob_column_encoding():  # type: ignore[no-untyped-def]
    """The ``ColumnEncoding`` of a blob column in a 2.0 file: ``blob{inner: values{}}``."""

    return pb20.ColumnEncoding(blob=pb20.Blob(inner=pb20.ColumnEncoding(values={})))


_V2_ROW = np.dtype([("kind", "u1"), ("position", "<u8"), ("size", "<u8"), ("blob_id", "<u4"), ("uri_len", "<u4")])


def _v2_fields() -> list[pb.VariablePackedStruct.FieldEncoding]:
    def fixed(bits: int) -> pb.VariablePackedStruct.FieldEncoding:
        return pb.VariablePackedStruct.FieldEncoding(
            value=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=bits)), bits_per_value=bits
        )

    uri = pb.VariablePackedStruct.FieldEncoding(
        value=pb.CompressiveEncoding(
            variable=pb.Variable(offsets=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=32)))
        ),
        bits_per_length=32,
    )
    return [fixed(8), fixed(64), fixed(64), fixed(32), uri]


def _v2_page(field: LanceField, positions: np.ndarray, sizes: np.ndarray, nulls: np.ndarray) -> EncodedPage:

    n = positions.size
    any_null = bool(nulls.any())
    def_ = nulls.astype(np.uint16) if any_null else None
    layers = (NULLABLE_ITEM,) if any_null else (ALL_VALID_ITEM,)
    if any_null and bool(nulls.all()):
        leaf = LeafColumn(field, pa.nulls(n, pa.large_binary()), None, def_, layers, n, n)
        return _simple_all_null(leaf)
    present = ~nulls
    rows = np.zeros(int(present.sum()), _V2_ROW)
    rows["position"] = positions[present]
    rows["size"] = sizes[present]
    row_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(present * _V2_ROW.itemsize, out=row_offsets[1:])
    validity = pa.py_buffer(np.packbits(present, bitorder="little").tobytes()) if any_null else None
    values = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [validity, pa.py_buffer(row_offsets.tobytes()), pa.py_buffer(rows.tobytes())]
    )
    leaf = LeafColumn(field, values, None, def_, layers, n, n)
    page = _fullzip(leaf, _values_of(values), "none")
    fz = page.layout.full_zip_layout
    fz.value_compression.CopyFrom(
        pb.CompressiveEncoding(variable_packed_struct=pb.VariablePackedStruct(fields=_v2_fields()))
    )
    return page
