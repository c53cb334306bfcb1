# SPDX-License-Identifier: Apache-2.0
"""Read one field of a Lance 2.0 data file into Arrow.

In 2.0 every node of a field's type tree has its own column, in depth-first pre-order:

* a primitive-like field (numbers, temporal, decimal, bool, strings/binary, fixed-size
  binary, fixed-size lists of those, dictionaries, packed structs): **one** column;
* a list / large list: an offsets column (``List`` pages), then the item field's columns;
* a struct: a header column (``struct {}`` pages, no buffers), then each child's columns.

Pages carry no first-row number in 2.0 (``priority`` is always 0), so page positions are
the running sum of ``num_rows``.  Only the pages that overlap the wanted rows are decoded,
and within a page only the wanted values (plus one preceding offset) are read.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from lance_gpu._proto import encodings_v2_0_pb2 as pb
from lance_gpu.errors import LanceGpuError, SchemaMismatchError, UnsupportedEncodingError
from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.v2_0 import list as list_enc
from lance_gpu.file.v2_0 import registry
from lance_gpu.file.v2_0 import struct as struct_enc
from lance_gpu.file.v2_0.blocks import to_arrow, validity_buffer
from lance_gpu.file.v2_0.page import PageSource
from lance_gpu.protobuf import check_strict

_ARRAY_ENCODING = "lance.encodings.ArrayEncoding"
_COLUMN_ENCODING = "lance.encodings.ColumnEncoding"
_I32_MAX = 2**31 - 1

# Failures of numpy / pyarrow on bytes that do not make sense.  Anything of these kinds
# escaping a page decoder means the file is corrupt.
_DATA_ERRORS = (IndexError, ValueError, KeyError, OverflowError, ZeroDivisionError, MemoryError, pa.ArrowException)


def guard(ctx: DecodeContext, fn, *args):
    try:
        return fn(*args)
    except LanceGpuError:
        raise
    except _DATA_ERRORS as exc:
        raise ctx.corrupt(f"undecodable page data ({type(exc).__name__}: {exc})") from exc


def page_encoding(page, ctx: DecodeContext) -> pb.ArrayEncoding:
    anymsg = page.encoding
    url = anymsg.type_url
    if not url.endswith("/" + _ARRAY_ENCODING) and url != _ARRAY_ENCODING:
        raise ctx.unsupported(f"page encoding '{url}' in a 2.0 file (expected {_ARRAY_ENCODING})")
    enc = pb.ArrayEncoding()
    try:
        enc.ParseFromString(anymsg.value)
    except (DecodeError, RecursionError) as exc:
        raise ctx.corrupt(f"bad ArrayEncoding protobuf ({exc})") from exc
    check_strict(enc, ctx.path, ctx.where("ArrayEncoding"))
    return enc


# The descriptor a 2.0 blob column stores per row (lance_gpu.table.blobs reads it as this type).
BLOB_DESCRIPTION = pa.struct([pa.field("position", pa.uint64()), pa.field("size", pa.uint64())])


def _check_column_encoding(column, ctx: DecodeContext, t: pa.DataType | None = None) -> None:
    anymsg = column.encoding
    if anymsg is None or not anymsg.type_url.endswith(_COLUMN_ENCODING):
        return
    enc = pb.ColumnEncoding()
    try:
        enc.ParseFromString(anymsg.value)
    except DecodeError as exc:
        raise ctx.corrupt(f"bad ColumnEncoding protobuf ({exc})") from exc
    check_strict(enc, ctx.path, ctx.where("ColumnEncoding"))
    kind = enc.WhichOneof("column_encoding")
    if kind == "blob" and t != BLOB_DESCRIPTION:
        raise ctx.unsupported("2.0 blob column (ColumnEncoding 'blob') read as anything but its descriptors")


def _empty(t: pa.DataType) -> pa.Array:
    return pa.array([], type=t)


def _concat(arrays: list[pa.Array], t: pa.DataType) -> pa.Array:
    if not arrays:
        return _empty(t)
    if len(arrays) == 1:
        return arrays[0]
    if pa.types.is_dictionary(t):
        return _concat_dictionaries(arrays, t)
    return pa.concat_arrays(arrays)


def _concat_dictionaries(arrays: list[pa.DictionaryArray], t: pa.DictionaryType) -> pa.DictionaryArray:
    """Concatenate pages that each carry their own dictionary.

    Equal dictionaries (the usual case: the writer stores the batch's dictionary in every
    page) are kept as they are; otherwise the dictionaries are appended one after the other
    and each page's keys shifted (Arrow allows repeated dictionary values).  pyarrow's own
    unification refuses dictionaries that hold nulls, which pylance produces.
    """
    first = arrays[0].dictionary
    if all(a.dictionary.equals(first) for a in arrays[1:]):
        indices = pa.concat_arrays([a.indices for a in arrays])
        return pa.DictionaryArray.from_arrays(indices, first, ordered=t.ordered)
    sizes = [len(a.dictionary) for a in arrays]
    total = sum(sizes)
    limit = np.iinfo(t.index_type.to_pandas_dtype()).max
    if total - 1 > limit:
        return pa.concat_arrays(arrays)  # unify (may raise for dictionaries with nulls)
    dtype = np.dtype(t.index_type.to_pandas_dtype())
    keys, valid = [], []
    base = 0
    for a, size in zip(arrays, sizes):
        idx = a.indices
        raw = np.frombuffer(idx.buffers()[1], dtype)[idx.offset : idx.offset + len(idx)]
        keys.append(raw.astype(np.int64) + base)
        valid.append(np.asarray(idx.is_valid().to_numpy(zero_copy_only=False), bool))
        base += size
    all_keys = np.concatenate(keys).astype(dtype)
    vbuf, nulls = validity_buffer(np.concatenate(valid))
    indices = pa.Array.from_buffers(t.index_type, all_keys.size, [vbuf, pa.py_buffer(all_keys)], nulls)
    dictionary = pa.concat_arrays([a.dictionary for a in arrays])
    return pa.DictionaryArray.from_arrays(indices, dictionary, ordered=t.ordered)


class _Node:
    def __init__(self, file, column: int, t: pa.DataType) -> None:
        self.file = file
        self.column = column
        self.type = t
        self.ctx = DecodeContext(file.path, column)

    def read(self, start: int, stop: int) -> pa.Array:
        raise NotImplementedError


class _Leaf(_Node):
    def read(self, start: int, stop: int) -> pa.Array:
        if stop <= start:
            return _empty(self.type)
        ctx = self.ctx
        col = self.file.column(self.column)
        _check_column_encoding(col, ctx, self.type)
        arrays = []
        pos = 0
        for page_index, page in enumerate(col.pages):
            if pos >= stop:
                break
            rows = int(page.num_rows)
            end = pos + rows
            if rows > 0 and end > start:
                a = max(start, pos) - pos
                b = min(stop, end) - pos
                ctx = self.ctx.at_page(page_index)
                enc = page_encoding(page, ctx)
                src = PageSource(self.file, col, page, ctx)
                block = guard(ctx, registry.decode, enc, src, a, b, self.type)
                if block.n != b - a:
                    raise ctx.corrupt(f"page decoded to {block.n} values, expected {b - a}")
                arrays.append(guard(ctx, to_arrow, block, self.type, ctx))
            pos = end
        ctx = self.ctx
        if pos < stop:
            raise ctx.corrupt(f"column holds {pos} rows, rows up to {stop} wanted")
        return guard(ctx, _concat, arrays, self.type)


class _List(_Node):
    def __init__(self, file, column: int, t: pa.DataType, child: _Node) -> None:
        super().__init__(file, column, t)
        self.child = child

    def read(self, start: int, stop: int) -> pa.Array:
        ctx = self.ctx
        n = stop - start
        col = self.file.column(self.column)
        if n <= 0:
            offsets, validity, ranges = np.zeros(1, np.int64), np.zeros(0, bool), []
        else:
            _check_column_encoding(col, ctx)
            offsets, validity, ranges = list_enc.read_offsets(self.file, col, start, stop, ctx, page_encoding, guard)
        pieces = [self.child.read(s, e) for s, e in ranges]
        child = guard(ctx, _concat, pieces, self.type.value_type)
        total = int(offsets[-1])
        if len(child) != total:
            raise ctx.corrupt(f"list items column returned {len(child)} items, offsets need {total}")
        if pa.types.is_large_list(self.type):
            offs = offsets
        else:
            if total > _I32_MAX:
                raise ctx.corrupt(f"{total} list items do not fit the 32-bit offsets of {self.type}")
            offs = offsets.astype(np.int32)
        vbuf, nulls = validity_buffer(validity)
        return guard(
            ctx,
            pa.Array.from_buffers,
            self.type,
            n,
            [vbuf, pa.py_buffer(offs)],
            nulls,
            0,
            [child],
        )


class _LegacyBinary(_Node):
    """A string / binary field as pylance 0.13-era 2.0 files wrote it: a List offsets column
    (``column``) over a Flat column of 8-bit items (``column + 1``, which the manifest's
    column indices do not name)."""

    def read(self, start: int, stop: int) -> pa.Array:
        ctx = self.ctx
        n = stop - start
        if n <= 0:
            return _empty(self.type)
        col = self.file.column(self.column)
        offsets, validity, ranges = list_enc.read_offsets(self.file, col, start, stop, ctx, page_encoding, guard)
        items = _Leaf(self.file, self.column + 1, pa.uint8())
        pieces = [items.read(s, e) for s, e in ranges]
        data = guard(ctx, _concat, pieces, pa.uint8()) if pieces else pa.array([], pa.uint8())
        total = int(offsets[-1])
        if len(data) != total:
            raise ctx.corrupt(f"string bytes column returned {len(data)} bytes, offsets need {total}")
        large = pa.types.is_large_string(self.type) or pa.types.is_large_binary(self.type)
        if not large and total > _I32_MAX:
            raise ctx.corrupt(f"{total} bytes do not fit the 32-bit offsets of {self.type}")
        offs = offsets if large else offsets.astype(np.int32)
        vbuf, nulls = validity_buffer(validity)
        values = data.buffers()[1] if len(data) else pa.py_buffer(b"")
        if len(data) and data.offset:
            values = pa.py_buffer(data.to_numpy(zero_copy_only=False).tobytes())
        return guard(ctx, pa.Array.from_buffers, self.type, n, [vbuf, pa.py_buffer(offs), values], nulls)


def _legacy_binary_column(file, column: int, ctx: DecodeContext) -> bool:
    """Whether a string / binary field's column holds List offsets pages (0.13-era 2.0
    files) followed by its bytes column."""
    col = file.column(column)
    page = next((p for p in col.pages if int(p.num_rows) > 0), None)
    if page is None or column + 1 >= file.num_columns:
        return False
    return registry.variant(page_encoding(page, ctx)) == "list"


class _Struct(_Node):
    def __init__(self, file, column: int, t: pa.DataType, children: list[_Node]) -> None:
        super().__init__(file, column, t)
        self.children = children

    def read(self, start: int, stop: int) -> pa.Array:
        ctx = self.ctx
        n = stop - start
        col = self.file.column(self.column)
        rows = struct_enc.header_rows(col, ctx, page_encoding)
        if col.pages and stop > rows:
            raise ctx.corrupt(f"struct header column holds {rows} rows, rows up to {stop} wanted")
        children = [c.read(start, stop) for c in self.children]
        for c in children:
            if len(c) != n:
                raise ctx.corrupt(f"struct child decoded to {len(c)} rows, expected {n}")
        return guard(ctx, pa.Array.from_buffers, self.type, n, [None], 0, 0, children)


class _Columns:
    def __init__(self, columns: list[int]) -> None:
        self.columns = [int(c) for c in columns]
        self.pos = 0

    def take(self, field_name: str) -> int:
        if self.pos >= len(self.columns):
            raise SchemaMismatchError(
                f"field '{field_name}' needs more columns than the {len(self.columns)} given"
            )
        c = self.columns[self.pos]
        self.pos += 1
        return c


def _is_packed_metadata(field: pa.Field) -> bool:
    md = field.metadata or {}
    if md.get(b"packed", b"").lower() == b"true":
        return True
    return b"lance-encoding:packed" in md


def _plan(file, field: pa.Field, cols: _Columns) -> _Node:
    t = field.type
    if pa.types.is_map(t):
        raise UnsupportedEncodingError(f"{file.path}: field '{field.name}': map columns do not exist in 2.0 files")
    if pa.types.is_struct(t):
        c = cols.take(field.name)
        ctx = DecodeContext(file.path, c)
        col = file.column(c)
        packed = struct_enc.is_packed(col, ctx, page_encoding) if col.pages else _is_packed_metadata(field)
        if packed:
            return _Leaf(file, c, t)
        children = [_plan(file, t.field(i), cols) for i in range(t.num_fields)]
        return _Struct(file, c, t, children)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        c = cols.take(field.name)
        return _List(file, c, t, _plan(file, t.value_field, cols))
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t) or pa.types.is_union(t):
        raise UnsupportedEncodingError(f"{file.path}: field '{field.name}' of type {t} cannot be read from a 2.0 file")
    c = cols.take(field.name)
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)) \
            and _legacy_binary_column(file, c, DecodeContext(file.path, c)):
        return _LegacyBinary(file, c, t)
    return _Leaf(file, c, t)


def read_field(file, field: pa.Field, columns: list[int], row_range: tuple[int, int] | None = None) -> pa.Array:
    """Read ``field`` (a top-level field of the file's schema) as one Arrow array.

    :param file: an open :class:`~lance_gpu.file.container.LanceFileReader` of a 2.0 file.
    :param field: the field, with the Arrow type to return.
    :param columns: the file column indices of the field's subtree nodes, depth-first
        pre-order (a packed struct's children have none).
    :param row_range: ``(start, stop)`` of the rows to return; ``None`` means all.
    """
    if str(file.version) != "2.0":
        raise UnsupportedEncodingError(f"{file.path}: the 2.0 reader cannot read a {file.version} file")
    num_rows = int(file.num_rows)
    if row_range is None:
        start, stop = 0, num_rows
    else:
        start, stop = (int(x) for x in row_range)
        if not 0 <= start <= stop <= num_rows:
            raise ValueError(f"row range ({start}, {stop}) outside the file's {num_rows} rows")
    cols = _Columns(columns)
    node = _plan(file, field, cols)
    if cols.pos != len(cols.columns):
        raise SchemaMismatchError(
            f"field '{field.name}' uses {cols.pos} columns but {len(cols.columns)} were given"
        )
    out = node.read(start, stop)
    if len(out) != stop - start:
        raise DecodeContext(file.path, node.column).corrupt(
            f"field '{field.name}' decoded to {len(out)} rows, expected {stop - start}"
        )
    return out
