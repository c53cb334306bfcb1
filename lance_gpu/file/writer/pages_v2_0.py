# SPDX-License-Identifier: Apache-2.0
"""Encoding one top-level field's rows as file-version 2.0 pages, as pylance 14 writes them
(``data_storage_version="2.0"``; read back by :mod:`lance_gpu.file.v2_0`).

In 2.0 every schema field owns a column, parents included, in depth-first order; a page is
one ``lance.encodings.ArrayEncoding`` tree whose leaves name page buffers by index (in the
order the tree lists them).  What pylance 14 writes, and this module too:

* fixed-width values (ints, floats, dates, times, timestamps, decimals, fixed-size binary):
  ``Nullable{no_nulls{Flat{bits}}}``, ``Nullable{some_nulls{validity: Flat{1}, values:
  Flat{bits}}}`` (null slots keep their bytes) or ``Nullable{all_nulls}`` (no buffers);
  booleans are ``Flat{1}``.  No bit-packing, no constants.
* fixed-size lists of those: the same ``Nullable`` wrapper around ``FixedSizeList{dimension,
  items}``, ``items`` itself ``Nullable`` over ``Flat`` (item validity, then the values).
* strings, binaries (and their large variants, JSONB): ``Binary{indices: Nullable{no_nulls
  {Flat{64}}}, bytes: Flat{8}, null_adjustment}`` -- u64 LE *end* offsets (no leading 0), a
  null value stores ``end + null_adjustment`` where ``null_adjustment = total bytes + 1``.
  A ``string`` (not ``large_string`` or binary) page of at least 100 values with fewer than
  100 distinct ones is ``Dictionary{indices: Nullable{no_nulls{Flat{8}}}, items: Binary,
  num_dictionary_items}``: u8 indices, 1-based, 0 for null; items in first-seen order (a
  page of only nulls has the one item ``""``).  An empty page (list items) of fixed-width
  values is ``Nullable{all_nulls}``, of binaries a ``Binary`` with ``null_adjustment`` 0.
* lists: ``List{offsets: Nullable{no_nulls{Flat{64}}}, null_offset_adjustment, num_items}``
  -- u64 end offsets relative to the page's first item, a null list ``end + num_items + 1``;
  the items are the next column(s), with their own pages of ``num_items`` rows.
* structs: a header column whose pages are ``SimpleStruct{}`` without buffers; 2.0 cannot
  store struct nulls (refused, as pylance refuses them).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu._proto import encodings_v2_0_pb2 as pb
from lance_gpu.errors import SchemaMismatchError, UnsupportedFeatureError
from lance_gpu.file.writer._jsonb import text_to_jsonb
from lance_gpu.file.writer.pages import EncodedPage
from lance_gpu.file.writer.shred import _plain
from lance_gpu.table.schema import LanceField

__all__ = ["DICTIONARY_THRESHOLD", "encode_field_v2_0"]

#: A ``string`` page of at least this many values with fewer distinct ones is dictionary encoded.
DICTIONARY_THRESHOLD = 100


class _Buffers:
    """The page's buffers in the order the encoding tree names them."""

    def __init__(self) -> None:
        self.items: list[np.ndarray] = []

    def add(self, data: np.ndarray | bytes) -> pb.Buffer:
        self.items.append(np.frombuffer(data, np.uint8) if isinstance(data, bytes) else data.view(np.uint8).reshape(-1))
        return pb.Buffer(buffer_index=len(self.items) - 1, buffer_type=pb.Buffer.page)


def _flat(bufs: _Buffers, data: np.ndarray, bits: int) -> pb.ArrayEncoding:
    return pb.ArrayEncoding(flat=pb.Flat(bits_per_value=bits, buffer=bufs.add(data)))


def _validity_bits(valid: np.ndarray) -> np.ndarray:
    return np.packbits(valid, bitorder="little")


def _nullable(bufs: _Buffers, valid: np.ndarray | None, values) -> pb.ArrayEncoding:  # type: ignore[no-untyped-def]
    """``Nullable`` around the encoding ``values(bufs)`` builds (validity buffer first)."""
    if valid is None:
        return pb.ArrayEncoding(nullable=pb.Nullable(no_nulls=pb.Nullable.NoNull(values=values(bufs))))
    if not valid.any():
        return pb.ArrayEncoding(nullable=pb.Nullable(all_nulls=pb.Nullable.AllNull()))
    validity = _flat(bufs, _validity_bits(valid), 1)
    return pb.ArrayEncoding(nullable=pb.Nullable(some_nulls=pb.Nullable.SomeNull(validity=validity, values=values(bufs))))


def _valid(arr: pa.Array) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _fixed_bytes(arr: pa.Array) -> tuple[np.ndarray, int]:
    """Packed value bytes (null slots included) and bits per value of a fixed-width array."""
    t = arr.type
    if pa.types.is_boolean(t):
        bits = np.unpackbits(np.frombuffer(arr.buffers()[1], np.uint8), bitorder="little")[arr.offset : arr.offset + len(arr)]
        return np.packbits(bits, bitorder="little"), 1
    width = t.bit_width
    if width % 8:
        raise UnsupportedFeatureError(f"values of {width} bits cannot be written to a 2.0 file")
    nbytes = width // 8
    data = np.frombuffer(arr.buffers()[1], np.uint8, len(arr) * nbytes, arr.offset * nbytes)
    return data, width


def _ends(offsets: np.ndarray, valid: np.ndarray | None, adjustment: int) -> np.ndarray:
    ends = (offsets[1:] - offsets[0]).astype(np.uint64)
    if valid is not None:
        ends[~valid] += np.uint64(adjustment)
    return ends


def _binary(bufs: _Buffers, arr: pa.Array) -> pb.ArrayEncoding:
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    itype = np.dtype(np.int64 if large else np.int32)
    offsets = np.frombuffer(arr.buffers()[1], itype, len(arr) + 1, arr.offset * itype.itemsize).astype(np.int64)
    data = arr.buffers()[2]
    first, last = int(offsets[0]), int(offsets[-1])
    raw = np.frombuffer(data, np.uint8)[first:last] if data is not None else np.zeros(0, np.uint8)
    adjustment = last - first + 1 if len(arr) else 0  # pylance leaves it 0 on an empty page
    indices = _nullable(bufs, None, lambda b: _flat(b, _ends(offsets, _valid(arr), adjustment), 64))
    return pb.ArrayEncoding(binary=pb.Binary(indices=indices, bytes=_flat(bufs, raw, 8), null_adjustment=adjustment))


def _dictionary(bufs: _Buffers, arr: pa.Array) -> pb.ArrayEncoding | None:
    n = len(arr)
    if n < DICTIONARY_THRESHOLD or not pa.types.is_string(arr.type):
        return None
    unique = pc.unique(arr.drop_null()) if arr.null_count < n else pa.array([""], pa.string())
    if len(unique) >= DICTIONARY_THRESHOLD:
        return None
    keys = pc.index_in(arr, value_set=unique).fill_null(-1).to_numpy(zero_copy_only=False)
    indices = (keys + 1).astype(np.uint8)
    ind = _nullable(bufs, None, lambda b: _flat(b, indices, 8))
    items = _binary(bufs, unique)
    return pb.ArrayEncoding(dictionary=pb.Dictionary(indices=ind, items=items, num_dictionary_items=len(unique)))


def _arrow_dictionary(bufs: _Buffers, arr: pa.DictionaryArray) -> pb.ArrayEncoding:
    """An Arrow dictionary column as pylance 14 writes it: ``Dictionary{indices:
    Nullable{no_nulls{Flat{key bits}}}, items: Binary}`` with the array's own 0-based keys
    and dictionary; a null key points at one null item appended to the dictionary.
    Dictionaries of other than strings / binary are written as plain values."""
    t = arr.type
    if not any(f(t.value_type) for f in (pa.types.is_string, pa.types.is_binary, pa.types.is_large_string, pa.types.is_large_binary)):
        return _leaf(bufs, arr.cast(t.value_type), "")
    items = arr.dictionary
    keys = arr.indices.to_numpy(zero_copy_only=False)
    if arr.null_count:
        keys = arr.indices.fill_null(len(items)).to_numpy(zero_copy_only=False)
        items = pa.concat_arrays([items, pa.nulls(1, items.type)])
    ind = _nullable(bufs, None, lambda b: _flat(b, keys, t.index_type.bit_width))
    enc = _binary(bufs, items)
    return pb.ArrayEncoding(dictionary=pb.Dictionary(indices=ind, items=enc, num_dictionary_items=len(items)))


def _leaf(bufs: _Buffers, arr: pa.Array, path: str) -> pb.ArrayEncoding:
    if pa.types.is_dictionary(arr.type):
        return _arrow_dictionary(bufs, arr)
    t = arr.type
    if pa.types.is_null(t):
        return pb.ArrayEncoding(nullable=pb.Nullable(all_nulls=pb.Nullable.AllNull()))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _dictionary(bufs, arr) or _binary(bufs, arr)
    if pa.types.is_fixed_size_list(t):
        child = _plain(arr.values.slice(arr.offset * t.list_size, len(arr) * t.list_size))
        if pa.types.is_fixed_size_list(child.type) or not _is_fixed(child.type):
            raise UnsupportedFeatureError(f"field {path!r}: fixed-size lists of {child.type} cannot be written to 2.0 files")

        def fsl(b: _Buffers) -> pb.ArrayEncoding:
            items = _nullable(b, _valid(child), lambda bb: _flat(bb, *_fixed_bytes(child)))
            return pb.ArrayEncoding(fixed_size_list=pb.FixedSizeList(dimension=t.list_size, items=items))

        return _nullable(bufs, _valid(arr), fsl)
    if _is_fixed(t):
        if len(arr) == 0:  # an empty items page: pylance marks it all-null
            return pb.ArrayEncoding(nullable=pb.Nullable(all_nulls=pb.Nullable.AllNull()))
        return _nullable(bufs, _valid(arr), lambda b: _flat(b, *_fixed_bytes(arr)))
    raise UnsupportedFeatureError(f"field {path!r}: {t} cannot be written to a 2.0 file")


def _is_fixed(t: pa.DataType) -> bool:
    return pa.types.is_boolean(t) or (t.bit_width > 0 if hasattr(t, "bit_width") and not pa.types.is_nested(t) else False)


def encode_field_v2_0(array: pa.Array, field: LanceField) -> list[tuple[int, EncodedPage]]:
    """The pages of one top-level field's rows: ``(column index within the field, page)``,
    one page per column, columns in depth-first order (the field's ``walk()``)."""
    out: list[tuple[int, EncodedPage]] = []
    counter = [0]

    def walk(arr: pa.Array, f: LanceField) -> None:
        column = counter[0]
        counter[0] += 1
        if f.logical_type == "json" and isinstance(arr, pa.ExtensionArray):

            arr = text_to_jsonb(arr.storage, f.dotted_path)
        arr = _plain(arr)
        t = arr.type
        bufs = _Buffers()
        if pa.types.is_struct(t):
            if arr.null_count:
                raise SchemaMismatchError(
                    f"The struct field {f.dotted_path!r} contains {arr.null_count} null value(s), but Lance file "
                    "version 2.0 does not encode struct validity; use file version 2.1 or later"
                )
            out.append((column, EncodedPage(pb.ArrayEncoding(struct=pb.SimpleStruct()), [], len(arr))))  # type: ignore[arg-type]
            for i, child in enumerate(f.children):
                walk(arr.field(i), child)
            return
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            offsets = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
            num_items = int(offsets[-1] - offsets[0])
            ends = _ends(offsets, _valid(arr), num_items + 1)
            enc = pb.ArrayEncoding(list=pb.List(
                offsets=_nullable(bufs, None, lambda b: _flat(b, ends, 64)),
                null_offset_adjustment=num_items + 1,
                num_items=num_items,
            ))
            out.append((column, EncodedPage(enc, bufs.items, len(arr))))  # type: ignore[arg-type]
            walk(arr.values.slice(int(offsets[0]), num_items), f.children[0])
            return
        if f.children and not pa.types.is_fixed_size_list(t):
            raise UnsupportedFeatureError(f"field {f.dotted_path!r}: {t} cannot be written to a 2.0 file")
        enc = _leaf(bufs, arr, f.dotted_path)
        out.append((column, EncodedPage(enc, bufs.items, len(arr))))  # type: ignore[arg-type]

    walk(array, field)
    return out
