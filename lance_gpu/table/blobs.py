# SPDX-License-Identifier: Apache-2.0
"""Blob columns: their descriptors as pylance returns them, and lazy file-like readers.

pylance stores a blob column's bytes out of line and keeps one *descriptor* per row in the
column itself; ``to_table`` returns the descriptors, ``take_blobs`` file-like objects.

* Blob v1 (``lance-encoding:blob`` on a ``large_binary`` field; files 2.0 and 2.1): the
  descriptor is ``struct<position: uint64, size: uint64>``, the bytes live in the same data
  file at absolute offset ``position``. In 2.1 files the column is a ``BlobLayout`` page
  over mini-blocks of packed 16-byte rows (position, size; little-endian); a null row is
  stored as ``size == 0`` with a non-zero position (an empty blob has position 0). In 2.0
  files (ColumnEncoding ``blob`` over packed-struct pages) a null row reads as
  ``{position: 1, size: 0}``, as pylance returns it; ``take_blobs`` gives None for it.
* Blob v2 (``lance.blob.v2`` extension struct of ``data`` / ``uri``; file 2.2): the
  descriptor is ``struct<kind: uint8, position: uint64, size: uint64, blob_id: uint32,
  blob_uri: string>`` (all non-null; the row itself nullable), stored as a full-zip
  VariablePackedStruct. ``kind`` 0 means inline: the bytes live in the same data file at
  ``position``; kind 1 (pylance packs values of 64 KiB and more) and kind 2 (a dedicated
  file for the biggest values) at ``position`` of the sidecar file
  ``data/{data file stem}/{blob_id bit-reversed as 32 binary digits}.blob``.  External URIs
  (kind 3, or a ``blob_uri``) raise :class:`~lance_gpu.errors.UnsupportedFeatureError`
  when their bytes are read.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu.errors import (
    InvalidArgumentError,
    RowOutOfRangeError,
    SchemaMismatchError,
    UnsupportedEncodingError,
    UnsupportedFeatureError,
)
from lance_gpu.file.container import FileVersion, LanceFileReader
from lance_gpu.file.encodings.packed_struct import split_fixed_rows, split_variable_rows
from lance_gpu.file.reader import read_field, take_field
from lance_gpu.io.store import ObjectStore, ReadHandle, join
from lance_gpu.table.schema import LanceField, column_index_map

if TYPE_CHECKING:
    from lance_gpu.table.snapshot import FragmentSnapshot, TableSnapshot

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


def blob_kind(field: LanceField) -> int:
    """1 for a blob v1 field, 2 for blob v2, 0 for a field that is not a blob."""
    meta = field.metadata
    if field.extension_name == BLOB_V2 or meta.get("ARROW:extension:name") in (BLOB_V2, BLOB_V2.encode()):
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


def _column(frag: FragmentSnapshot, field: LanceField) -> tuple[str, int, LanceFileReader]:

    for df in frag.pb.files:
        cmap = column_index_map(df, frag.snapshot.lance_schema)
        if field.id in cmap:
            path = join(frag.snapshot.root, "data", df.path)
            reader = frag.file_reader(path)
            if not isinstance(reader, LanceFileReader):
                raise UnsupportedEncodingError(f"{path}: blob field {field.name!r} in a legacy (0.1) data file")
            return path, cmap[field.id], reader
    raise UnsupportedEncodingError(f"fragment {frag.fragment_id}: no data file holds blob field {field.name!r}")


def read_descriptions(frag: FragmentSnapshot, field: LanceField, rows: np.ndarray | None) -> pa.Array:
    """The descriptors of ``field`` for all physical rows of ``frag`` or the sorted ``rows``."""
    path, column, reader = _column(frag, field)
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


class BlobFile(io.RawIOBase):
    """A read-only, seekable file-like view of one blob; bytes are read only when asked for.

    ``read(n)``, ``readinto``, ``seek``, ``tell``, ``size()``; a context manager. The data file
    is opened on first read and closed by :meth:`close`.
    """

    def __init__(self, store: ObjectStore, path: str, position: int, size: int) -> None:
        super().__init__()
        self._store = store
        self._path = path
        self._start = position
        self._size = size
        self._pos = 0
        self._reader: ReadHandle | None = None

    def __repr__(self) -> str:
        return f"<BlobFile size={self._size}>"

    def size(self) -> int:
        """The blob's length in bytes."""
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence {whence}")
        target = base + offset
        if target < 0:
            raise ValueError(f"negative seek position {target}")
        self._pos = target
        return target

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def,override]
        if self.closed:
            raise ValueError("I/O operation on a closed BlobFile")
        view = memoryview(buffer).cast("B")
        n = max(0, min(len(view), self._size - self._pos))
        if n == 0:
            return 0
        if self._reader is None:
            self._reader = self._store.open(self._path)
        view[:n] = self._reader.read(self._start + self._pos, n).tobytes()
        self._pos += n
        return n

    def read_range(self, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)`` of the blob, without moving the cursor (pylance's
        ``BlobFile.read_range``); a range past the blob's end raises :class:`InvalidArgumentError`."""
        return self.read_ranges([(offset, length)])[0]

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """One payload per ``(offset, length)`` range, in input order, without moving the cursor;
        every range is checked against the blob's size before any is read."""
        if self.closed:
            raise ValueError("I/O operation on a closed BlobFile")
        for offset, length in ranges:
            if offset < 0 or length < 0:
                raise InvalidArgumentError(f"blob range ({offset}, {length}) is negative")
            if offset + length > self._size:
                raise InvalidArgumentError(f"blob range end {offset + length} exceeds blob size {self._size}")
        if self._reader is None:
            self._reader = self._store.open(self._path)
        reader = self._reader
        return [reader.read(self._start + offset, length).tobytes() if length else b"" for offset, length in ranges]

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        super().close()


class BlobColumn:
    """pylance's ``lance.BlobColumn``: iterate a binary column's values as file-like objects
    (``io.BytesIO``; a null value reads as empty, as pylance's does).

    Parameters
    ----------
    blob_column : pyarrow.Array or pyarrow.ChunkedArray
        A ``binary`` or ``large_binary`` column (anything else raises :class:`InvalidArgumentError`).
    """

    def __init__(self, blob_column: pa.Array | pa.ChunkedArray) -> None:
        if not isinstance(blob_column, pa.Array | pa.ChunkedArray):
            raise InvalidArgumentError(f"Expected a pyarrow.Array or pyarrow.ChunkedArray, got {type(blob_column)}")
        if not (pa.types.is_large_binary(blob_column.type) or pa.types.is_binary(blob_column.type)):
            raise InvalidArgumentError(f"Expected a binary array, got {blob_column.type}")
        self.blob_column = blob_column

    def __iter__(self) -> Iterator[io.BytesIO]:
        return (io.BytesIO(value.as_py() or b"") for value in self.blob_column)


def sidecar_name(blob_id: int) -> str:
    """File name pylance gives the sidecar blob file ``blob_id`` (its u32 bits reversed,
    as 32 binary digits)."""
    return f"{int(f'{blob_id:032b}'[::-1], 2):032b}.blob"


def _blob_path(data_path: str, d: dict) -> str:
    """Where the bytes of descriptor ``d`` (a ``to_pylist`` row) live."""
    kind = int(d.get("kind", 0))
    if kind == 0 and not d.get("blob_uri"):
        return data_path
    if kind in (1, 2) and not d.get("blob_uri"):
        stem = data_path[: -len(".lance")] if data_path.endswith(".lance") else data_path
        return f"{stem}/{sidecar_name(int(d['blob_id']))}"
    raise UnsupportedFeatureError(
        f"{data_path}: blob stored outside the dataset (kind {kind}, uri {d.get('blob_uri')!r})"
    )


def blob_files(frag: FragmentSnapshot, field: LanceField, rows: np.ndarray) -> list[BlobFile | None]:
    """A :class:`BlobFile` (None for a null blob) per physical row of ``rows`` (sorted, unique)."""
    path, _column_index, _reader = _column(frag, field)
    desc = read_descriptions(frag, field, rows)
    out: list[BlobFile | None] = []
    for d in desc.to_pylist():
        if d is None or (blob_kind(field) == 1 and d["size"] == 0 and d["position"] != 0):
            out.append(None)
            continue
        out.append(BlobFile(frag.snapshot.store, _blob_path(path, d), int(d["position"]), int(d["size"])))
    return out


def read_blob_bytes(frag: FragmentSnapshot, field: LanceField, rows: np.ndarray | None) -> pa.LargeBinaryArray:
    """The bytes of blob ``field`` for every physical row of ``frag`` or the sorted ``rows``,
    as ``large_binary`` (null blobs null): what a writer rewrites the field from."""
    path, _column_index, reader = _column(frag, field)
    desc = read_descriptions(frag, field, rows)
    n = len(desc)
    position = desc.field("position").to_numpy(zero_copy_only=False).astype(np.int64)
    size = desc.field("size").to_numpy(zero_copy_only=False).astype(np.int64)
    valid = desc.is_valid().to_numpy(zero_copy_only=False)
    inline = valid.copy()
    if blob_kind(field) == 1:  # 2.0 files show a null as (1, 0)
        valid &= ~((size == 0) & (position != 0))
        inline = valid
    else:
        inline &= (desc.field("kind").to_numpy(zero_copy_only=False) == 0) & (
            pc.utf8_length(desc.field("blob_uri")).to_numpy(zero_copy_only=False) == 0)
    size = np.where(valid, size, 0)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(size, out=offsets[1:])
    data = np.empty(int(offsets[-1]), np.uint8)
    order = np.argsort(position, kind="stable")
    order = order[(size[order] > 0) & inline[order]]
    gathered = reader.read_gather(position[order], size[order])
    src = np.zeros(order.size + 1, np.int64)
    np.cumsum(size[order], out=src[1:])
    for k, i in enumerate(order.tolist()):  # one copy per blob (blobs are large)
        data[offsets[i] : offsets[i + 1]] = gathered[src[k] : src[k + 1]]
    store = frag.snapshot.store
    rows_desc = desc.to_pylist() if not inline[valid].all() else []
    for i in np.flatnonzero(valid & ~inline & (size > 0)).tolist():  # sidecar files (pylance's big blobs)
        d = rows_desc[i]
        data[offsets[i] : offsets[i + 1]] = store.read_range(_blob_path(path, d), int(d["position"]), int(size[i]))
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    return pa.LargeBinaryArray.from_buffers(  # type: ignore[return-value]
        pa.large_binary(), n, [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data.tobytes())]
    )


def with_blob_bytes(ds: TableSnapshot, table: pa.Table, fragment_ids: np.ndarray, offsets: np.ndarray) -> pa.Table:
    """``table`` (rows of ``ds`` at physical ``offsets`` of ``fragment_ids``, as a scan gives
    them) with each blob column's descriptors replaced by the blobs' bytes (``large_binary``
    marked ``lance-encoding:blob``): what a writer rewrites the rows from."""
    fields = {f.name: f for f in ds.lance_schema.fields if blob_kind(f)}
    names = [n for n in table.column_names if n in fields]
    if not names:
        return table
    frags = {f.fragment_id: f for f in ds.get_fragments()}
    fragment_ids = np.asarray(fragment_ids, np.int64)
    offsets = np.asarray(offsets, np.int64)
    for name in names:
        pieces: list[pa.Array] = []
        where: list[np.ndarray] = []
        for fid in np.unique(fragment_ids).tolist():
            picked = np.flatnonzero(fragment_ids == fid)
            rows, inverse = np.unique(offsets[picked], return_inverse=True)
            pieces.append(read_blob_bytes(frags[fid], fields[name], rows).take(pa.array(inverse)))
            where.append(picked)
        order = np.argsort(np.concatenate(where), kind="stable") if where else np.zeros(0, np.int64)
        stacked = pa.concat_arrays(pieces) if pieces else pa.array([], pa.large_binary())
        column = stacked.take(pa.array(order))
        i = table.schema.get_field_index(name)
        field = pa.field(name, pa.large_binary(), fields[name].nullable, metadata={BLOB_META_KEY: "true"})
        table = table.set_column(i, field, column)
    return table


def _as_int_array(values: object, what: str) -> np.ndarray:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = values.to_pylist()
    arr = np.asarray(values)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"take_blobs: {what} must be a list of integers")
    return arr.astype(np.int64)


def take_blobs(
    ds: TableSnapshot,
    blob_column: str,
    ids: object = None,
    addresses: object = None,
    indices: object = None,
) -> list[BlobFile | None]:
    """pylance's ``ds.take_blobs``: one lazily reading :class:`BlobFile` (None for a null
    blob) per requested row, in the order asked for. Exactly one of ``ids`` (row ids),
    ``addresses`` (``fragment_id << 32 | offset``) or ``indices`` (positions among the
    dataset's live rows) must be given."""

    given = [(k, v) for k, v in (("ids", ids), ("addresses", addresses), ("indices", indices)) if v is not None]
    if len(given) != 1:
        raise ValueError("take_blobs needs exactly one of ids, addresses or indices")
    what, values = given[0]
    wanted = _as_int_array(values, what)
    fields = {f.name: f for f in ds.lance_schema.fields}
    field = fields.get(blob_column)
    if field is None:
        raise SchemaMismatchError(f"take_blobs: no column {blob_column!r} in the dataset's schema {list(fields)}")
    if not blob_kind(field):
        raise SchemaMismatchError(f"take_blobs: column {blob_column!r} is not a blob column")
    frags = ds.fragments
    # (fragment, physical offset) per requested row
    locations: list[tuple[FragmentSnapshot, int]] = []
    if what == "indices":
        counts = np.array([f.live_count() for f in frags], np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)])
        if wanted.size and (wanted.min() < 0 or wanted.max() >= starts[-1]):
            bad = wanted[(wanted < 0) | (wanted >= starts[-1])][0]
            raise RowOutOfRangeError(f"take_blobs: index {int(bad)} is out of range for a dataset of {int(starts[-1])} rows")
        for i in wanted.tolist():
            fi = int(np.searchsorted(starts, i, side="right") - 1)
            frag = frags[fi]
            local = i - int(starts[fi])
            live = frag.live_rows
            locations.append((frag, local if live is None else int(live[local])))
    else:
        lookup: dict[int, tuple[FragmentSnapshot, int]] = {}
        if what == "ids":
            for frag in frags:
                for offset, rid in enumerate(frag.row_ids.tolist()):
                    lookup[rid] = (frag, offset)
        for v in wanted.tolist():
            if what == "ids":
                loc = lookup.get(v)
            else:
                owner = ds.get_fragment(v >> 32)
                loc = None if owner is None or (v & 0xFFFFFFFF) >= owner.physical_rows else (owner, v & 0xFFFFFFFF)
            if loc is None:
                raise RowOutOfRangeError(f"take_blobs: no row with {what[:-1] if what != 'addresses' else 'address'} {v}")
            locations.append(loc)
    result: list[BlobFile | None] = [None] * len(locations)
    groups: dict[int, list[int]] = {}
    for i, (frag, _offset) in enumerate(locations):
        groups.setdefault(frag.fragment_id, []).append(i)
    for members in groups.values():
        frag = locations[members[0]][0]
        offsets = np.array([locations[i][1] for i in members], np.int64)
        uniq, inverse = np.unique(offsets, return_inverse=True)
        files = blob_files(frag, field, uniq)
        for i, j in zip(members, inverse.tolist(), strict=True):
            f = files[j]
            result[i] = None if f is None else BlobFile(f._store, f._path, f._start, f._size)
    return result
