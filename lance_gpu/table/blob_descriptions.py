# SPDX-License-Identifier: Apache-2.0
"""Blob fields and their descriptors: which fields are blobs, the descriptor a scan returns
for each row, read from the data file's column (the byte layouts are in
:mod:`lance_gpu.table.blobs`, which reads the blobs themselves).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_gpu.file.container import FileVersion, LanceFileReader
from lance_gpu.file.encodings.packed_struct import split_fixed_rows, split_variable_rows
from lance_gpu.file.reader import read_field, take_field
from lance_gpu.table.schema import LanceField

__all__ = [
    "BLOB_META_KEY",
    "BLOB_V2",
    "V1_DESCRIPTION",
    "V2_DESCRIPTION",
    "blob_kind",
    "description_field",
    "read_descriptions",
]

BLOB_META_KEY = "lance-encoding:blob"
BLOB_V2 = "lance.blob.v2"

V1_DESCRIPTION = pa.struct([pa.field("position", pa.uint64()), pa.field("size", pa.uint64())])
V2_DESCRIPTION = pa.struct(
    [
        pa.field("kind", pa.uint8(), nullable=False),
        pa.field("position", pa.uint64(), nullable=False),
        pa.field("size", pa.uint64(), nullable=False),
        pa.field("blob_id", pa.uint32(), nullable=False),
        pa.field("blob_uri", pa.string(), nullable=False),
    ]
)
V2_DESCRIPTION_METADATA = {BLOB_META_KEY: "true", "lance-encoding:packed": "true"}
_V2_ROW = [("fixed", 1), ("fixed", 8), ("fixed", 8), ("fixed", 4), ("variable", 4)]


#: The extension name of blob v2 fields, as a field's metadata may hold it.
_BLOB_V2_NAMES = (BLOB_V2, BLOB_V2.encode())


def blob_kind(field: LanceField) -> int:
    """1 for a blob v1 field, 2 for blob v2, 0 for a field that is not a blob.  (Asked per
    field by every write and read: a field without metadata answers from its extension name.)"""
    meta = field.metadata
    if not meta:
        return 2 if field.extension_name == BLOB_V2 else 0
    if field.extension_name == BLOB_V2 or meta.get("ARROW:extension:name") in _BLOB_V2_NAMES:
        return 2
    flag = meta.get(BLOB_META_KEY)
    if flag in ("true", b"true") and field.logical_type in ("large_binary", "binary"):
        return 1
    return 0


def description_field(field: LanceField, arrow_field: pa.Field) -> pa.Field:
    """The field ``to_table`` returns for a blob field: its descriptor struct, with the
    blob field's metadata (v1) or the blob and packed flags (v2) as pylance reports them."""
    if blob_kind(field) == 2:
        return pa.field(field.name, V2_DESCRIPTION, nullable=True, metadata=V2_DESCRIPTION_METADATA)
    return pa.field(field.name, V1_DESCRIPTION, nullable=True, metadata=arrow_field.metadata)


def read_descriptions(reader: LanceFileReader, path: str, column: int, field: LanceField,
                      rows: np.ndarray | None) -> pa.Array:
    """The descriptors of blob ``field`` (column ``column`` of the data file ``reader`` reads,
    at ``path``) for all its rows or the sorted ``rows``."""
    kind = blob_kind(field)
    if reader.version == FileVersion(2, 0):
        # a packed struct<position, size> per row; nulls stay (position 1, size 0) as pylance shows
        from lance_gpu.file.v2_0 import read_field as read_v20

        desc = pa.field(field.name, V1_DESCRIPTION)
        if rows is None:
            return read_v20(reader, desc, [column], None)
        if rows.size == 0:
            return read_v20(reader, desc, [column], (0, 0))
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        return read_v20(reader, desc, [column], (lo, hi)).take(pa.array(rows - lo))
    stored = pa.field(field.name, pa.binary(16) if kind == 1 else pa.large_binary())
    raw = read_field(reader, stored, [column]) if rows is None else take_field(reader, stored, [column], rows)
    if isinstance(raw, pa.ChunkedArray):
        raw = raw.combine_chunks()
    if kind == 1:
        return _v1(raw, path)
    return _v2(raw, path)


def _v1(raw: pa.Array, path: str) -> pa.Array:
    n = len(raw)
    data = np.frombuffer(raw.buffers()[1], np.uint8, n * 16, raw.offset * 16).reshape(n, 16)
    position, size = (m.copy().view("<u8").ravel() for m in split_fixed_rows(data, [8, 8], path))
    null = (size == 0) & (position != 0)
    return pa.StructArray.from_arrays(
        [pa.array(position, pa.uint64()), pa.array(size, pa.uint64())],
        fields=list(V1_DESCRIPTION),
        mask=pa.array(null),
    )


def _v2(raw: pa.Array, path: str) -> pa.Array:
    valid = raw.is_valid().to_numpy(zero_copy_only=False)
    present = raw.drop_null()
    offsets = np.frombuffer(present.buffers()[1], np.int64, len(present) + 1, 8 * present.offset)
    data = np.frombuffer(present.buffers()[2], np.uint8) if present.buffers()[2] is not None else np.zeros(0, np.uint8)
    kinds, positions, sizes, ids, uris = split_variable_rows(offsets, data, _V2_ROW, path)
    where = np.flatnonzero(valid)

    def spread(values: list, t: pa.DataType, fill: object) -> pa.Array:
        out = [fill] * len(raw)
        for i, v in zip(where.tolist(), values, strict=True):
            out[i] = v
        return pa.array(out, t)

    children = [
        spread(kinds, pa.uint8(), 0),
        spread(positions, pa.uint64(), 0),
        spread(sizes, pa.uint64(), 0),
        spread(ids, pa.uint32(), 0),
        spread([u.decode() for u in uris], pa.string(), ""),  # type: ignore[union-attr]
    ]
    return pa.StructArray.from_arrays(children, fields=list(V2_DESCRIPTION), mask=pa.array(~valid))
