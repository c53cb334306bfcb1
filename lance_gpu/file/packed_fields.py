# SPDX-License-Identifier: Apache-2.0
"""Read a struct field stored packed (field metadata ``lance-encoding:packed: true``,
:func:`lance_gpu.table.packed.packed_struct`).

Layout (as pylance 14 writes it):

* The struct has **one** column, under the struct's own field id; its children have no
  column (a data file's ``fields`` / ``column_indices`` list only the parent).
* 2.1 / 2.2: the column's mini-block pages hold ``PackedStruct`` rows -- per row the
  children's values back to back, ``bits_per_value[i] / 8`` bytes each, little-endian,
  in child order -- with the struct's validity in the column's definition levels (children
  cannot be null: pylance refuses to write a child null).  Read here as one fixed-width
  leaf of ``row bytes`` (a ``fixed_size_binary``) whose nulls are the struct's, then split
  into the children (:func:`split_fixed_rows`).
* 2.0: the column's pages are ``packed_struct`` (no struct nulls: pylance refuses them in
  2.0), which :mod:`lance_gpu.file.v2_0` decodes given that one column.

* 2.2 with a fixed-size-list child: full-zip ``VariablePackedStruct`` pages whose fields
  all have a ``bits_per_value`` -- each row the same bytes as above, framed as a
  variable-width value.  Read as ``large_binary`` rows, checked to be ``row bytes`` long,
  then split the same way.

Children must be fixed-width (integers, floats, dates, times, timestamps, durations,
fixed-size lists of those).  Rows with variable-width children (2.2 packs structs with
string children as ``VariablePackedStruct`` too) are refused as unsupported.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_gpu.errors import CorruptFileError, UnsupportedEncodingError
from lance_gpu.file.container import FileVersion, LanceFileReader
from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.encodings.packed_struct import split_fixed_rows
from lance_gpu.file.reader import parse_layout, read_field, take_field

__all__ = ["child_bytes", "read_packed"]

def child_bytes(t: pa.DataType) -> int | None:
    """Bytes one value of ``t`` takes in a packed row; None where ``t`` is not fixed-width
    in whole bytes (booleans, variable width, nested structs, extension types)."""
    if isinstance(t, pa.BaseExtensionType):
        return None
    if pa.types.is_fixed_size_list(t):
        inner = child_bytes(t.value_type)
        return None if inner is None else inner * t.list_size
    if pa.types.is_boolean(t) or pa.types.is_struct(t) or pa.types.is_decimal(t):
        return None
    try:
        width = t.bit_width
    except ValueError:
        return None
    return width // 8 if width % 8 == 0 and width > 0 else None


def _child(data: np.ndarray, t: pa.DataType) -> pa.Array:
    """One child's ``[n, bytes]`` uint8 matrix as an Arrow array of ``t`` (no nulls)."""
    n = data.shape[0]
    buf = pa.py_buffer(np.ascontiguousarray(data).reshape(-1))
    if pa.types.is_fixed_size_list(t):
        inner = _child(np.ascontiguousarray(data).reshape(n * t.list_size, -1), t.value_type)
        return pa.FixedSizeListArray.from_arrays(inner, type=t)
    return pa.Array.from_buffers(t, n, [None, buf])


def _split(raw: pa.Array, t: pa.StructType, path: str) -> pa.StructArray:
    """Rows of a ``fixed_size_binary(row bytes)`` array (nulls: null structs) as ``t``."""
    widths = [child_bytes(t.field(i).type) for i in range(t.num_fields)]
    row = sum(w or 0 for w in widths)
    n = len(raw)
    body = raw.buffers()[1]
    rows = (np.frombuffer(body, np.uint8, n * row, raw.offset * row) if n and row else np.zeros(0, np.uint8)).reshape(n, row)
    parts = split_fixed_rows(rows, [w or 0 for w in widths], path)
    children = [_child(p, t.field(i).type) for i, p in enumerate(parts)]
    mask = None if raw.null_count == 0 else raw.is_null()
    return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)


def read_packed(reader: LanceFileReader, field: pa.Field, column: int, rows: np.ndarray | None) -> pa.Array:
    """Every row (``rows`` None) or the sorted file-local ``rows`` of packed struct
    ``field``, stored in ``column`` of the data file ``reader`` reads, as ``field.type``."""
    t = field.type
    if reader.version == FileVersion(2, 0):
        from lance_gpu.file.v2_0 import read_field as read_v20

        if rows is None:
            return read_v20(reader, field, [column], None)
        if rows.size == 0:
            return read_v20(reader, field, [column], (0, 0))
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        return read_v20(reader, field, [column], (lo, hi)).take(pa.array(rows - lo))
    widths = [child_bytes(t.field(i).type) for i in range(t.num_fields)]
    if not widths or any(w is None for w in widths):
        raise UnsupportedEncodingError(
            f"{reader.path}: packed struct field {field.name!r} of type {t}: only fixed-width children are read"
        )
    row = sum(w or 0 for w in widths)
    zipped = _zipped_widths(reader, column)
    if zipped is not None and zipped != widths:
        raise UnsupportedEncodingError(
            f"{reader.path}: packed struct field {field.name!r}: rows of fields {zipped} bytes where {t} has {widths}"
        )
    # mini-block PackedStruct rows read as fixed-width values; full-zip rows as byte strings
    stored = pa.field(field.name, pa.binary(row) if zipped is None else pa.large_binary())
    raw = read_field(reader, stored, [column]) if rows is None else take_field(reader, stored, [column], rows)
    if isinstance(raw, pa.ChunkedArray):
        raw = raw.combine_chunks()
    if zipped is not None:
        raw = _fixed_rows(raw, row, reader.path)
    return _split(raw, t, reader.path)


def _zipped_widths(reader: LanceFileReader, column: int) -> list[int] | None:
    """Per field, the bytes of a full-zip ``VariablePackedStruct`` column's fields (2.2 writes
    these for fixed-size-list children), or None for a column of other pages (mini-block
    ``PackedStruct``, all-null constant pages).  Variable-width fields are refused."""
    found = None
    for i, page in enumerate(reader.column(column).pages):
        ctx = DecodeContext(reader.path, column).at_page(i)
        layout = parse_layout(page, ctx)
        if layout.WhichOneof("layout") != "full_zip_layout":
            continue
        enc = layout.full_zip_layout.value_compression
        if enc.WhichOneof("compression") != "variable_packed_struct":
            continue
        widths = []
        for f in enc.variable_packed_struct.fields:
            if f.WhichOneof("layout") != "bits_per_value" or int(f.bits_per_value) % 8:
                raise ctx.unsupported("a packed struct with variable-width fields")
            widths.append(int(f.bits_per_value) // 8)
        if found is not None and widths != found:
            raise ctx.corrupt(f"packed struct pages of fields {found} and {widths} bytes")
        found = widths
    return found


def _fixed_rows(raw: pa.Array, row: int, path: str) -> pa.Array:
    """Full-zip packed rows (``large_binary``, each valid row ``row`` bytes) as a
    ``fixed_size_binary(row)`` array with the same nulls (a null row's bytes are zeros)."""
    n = len(raw)
    valid = raw.is_valid().to_numpy(zero_copy_only=False)
    offsets = np.frombuffer(raw.buffers()[1], np.int64, n + 1, raw.offset * 8)
    lengths = np.diff(offsets)
    if np.any(lengths[valid] != row) or np.any(lengths[~valid] != 0):
        raise CorruptFileError(path, f"packed struct rows of other than {row} bytes")
    data = raw.buffers()[2]
    body = np.zeros((n, row), np.uint8)
    if data is not None and valid.any():
        start = int(offsets[0])
        flat = np.frombuffer(data, np.uint8, int(offsets[-1]) - start, start)
        body[valid] = flat.reshape(-1, row)
    mask = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(row), n, [mask, pa.py_buffer(body.reshape(-1))])
