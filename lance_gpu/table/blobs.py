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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu.errors import (
    InvalidArgumentError,
    RowOutOfRangeError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from lance_gpu.io.store import ObjectStore, ReadHandle
from lance_gpu.table.blob_descriptions import BLOB_META_KEY, blob_kind
from lance_gpu.table.schema import LanceField
from lance_gpu.table.snapshot import FragmentSnapshot, TableSnapshot


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
    path, _column_index, _reader = frag.blob_column(field)
    desc = frag.blob_descriptions(field, rows)
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
    path, _column_index, reader = frag.blob_column(field)
    desc = frag.blob_descriptions(field, rows)
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
