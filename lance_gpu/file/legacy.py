# SPDX-License-Identifier: Apache-2.0
"""Read legacy (v1, ``data_storage_version="legacy"`` / ``"0.1"``) Lance data files.

A legacy file is written batch by batch; within a batch, field by field in schema order
(depth-first pre-order), each field's page right after the previous one, unaligned::

    pages of batch 0 (field by field), pages of batch 1, ...
    page table        int64 [field id (min..max)][batch][position, length]   <- page_table_position
    statistics pages and their page table (optional, Metadata.statistics)
    dictionary values (for dictionary fields), then
    u32 LE len | lance.table.Manifest (schema only, plus version info)      <- manifest_position
    u32 LE len | lance.file.Metadata                                        <- metadata position
    footer, 16 bytes LE: i64 metadata position | u16 major=0 | u16 minor=2 | "LANC"

``Metadata.batch_offsets`` are the cumulative row counts of the batches (``[0, n0, n0+n1, ...]``).
The page table has a row per field id from the schema's smallest id to its largest; fields
without pages (structs) and holes hold ``(0, 0)``.

Pages, by type (``length`` is the page table's second number):

* fixed stride (numbers, temporal, decimal, fixed-size binary, fixed-size lists of those):
  the values, ``length`` rows; bool bit-packed (LSB first).  **No validity**: a null
  is stored (and read back, as pylance reads it) as its zero value;
* string / binary (``VAR_BINARY``): the value bytes, then ``length + 1`` int64 *absolute
  file positions*; the page position names the positions array.  A field marked nullable
  reads an empty value as null (pylance's rule), so empty strings read as null;
* list / large list: ``length`` = rows + 1 int32 / int64 offsets starting at 0 (a null
  list is stored empty), then the item field's pages of the batch;
* struct: no page, its children's pages (no struct validity);
* dictionary: plain indices; the values are written once, after the statistics, as a
  plain / var-binary page at ``Field.dictionary.offset`` (``length`` values) of the file's
  own schema;
* null type: no bytes, ``length`` rows.
"""

from __future__ import annotations

import os
import struct as _struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from lance_gpu._proto import file_pb2, table_pb2
from lance_gpu.cpu import native
from lance_gpu.errors import CorruptFileError, MissingFileError, ObjectNotFoundError
from lance_gpu.file.container import MAGIC, TAIL_READ, FileVersion
from lance_gpu.file.jsonb import jsonb_to_text
from lance_gpu.io.resolve import resolve
from lance_gpu.io.store import ObjectStore, ReadHandle, open_with_tail

#: The legacy footer: i64 metadata position, u16 major, u16 minor, magic.
LEGACY_FOOTER_SIZE = 16
#: The footer version pylance 14 writes in legacy files.
LEGACY_MAJOR, LEGACY_MINOR = 0, 2


def is_legacy_file_version(major: int, minor: int) -> bool:
    """Whether a ``DataFile``'s (or footer's) file version is the legacy v1 format."""
    return major == 0 and minor <= 2


@dataclass(frozen=True, slots=True)
class _Page:
    position: int
    length: int


def _read_prefixed(io: ReadHandle, pos: int, message, path: str, what: str):
    """Parse the ``u32 LE length | protobuf`` section at ``pos`` into ``message``."""
    if pos < 0 or pos + 4 > io.size:
        raise CorruptFileError(path, f"{what} position {pos} lies outside the file")
    size = int(np.frombuffer(io.read(pos, 4).tobytes(), "<u4")[0])
    if pos + 4 + size > io.size:
        raise CorruptFileError(path, f"{what} of {size} bytes runs past the end of the file")
    try:
        message.ParseFromString(io.read(pos + 4, size).tobytes())
    except DecodeError as exc:
        raise CorruptFileError(path, f"bad {what} protobuf ({exc})") from exc
    return message


class LegacyFileReader:
    """One legacy data file: its metadata, page table and embedded schema, and the
    decoding of its fields (:meth:`read_field`).  Offers what the table layer asks of a
    data file reader (``version``, ``num_rows``, ``num_columns``, ``descriptor``, ``path``,
    ``io``, :meth:`prefetch`, :meth:`close`)."""

    def __init__(self, path: str | os.PathLike[str], store: ObjectStore | None = None) -> None:
        if store is None:
            store, path = resolve(path)
        self.store = store
        self.key = os.fspath(path)
        try:
            self.io, tail = open_with_tail(store, self.key, TAIL_READ)
        except ObjectNotFoundError as exc:
            raise MissingFileError(exc.uri, "data file does not exist") from exc
        self.path = self.io.path
        if self.io.size < LEGACY_FOOTER_SIZE or tail[-4:].tobytes() != MAGIC:
            raise CorruptFileError(self.path, "no Lance footer (magic LANC) at the end of the file")
        meta_pos, major, minor = _struct.unpack("<qHH", tail[-16:-4].tobytes())
        if not is_legacy_file_version(major, minor):
            raise CorruptFileError(self.path, f"footer version {major}.{minor} is not a legacy (0.1) file")
        self.version = FileVersion(major, minor)
        self.metadata = _read_prefixed(self.io, meta_pos, file_pb2.Metadata(), self.path, "Metadata")
        offsets = np.asarray(self.metadata.batch_offsets, np.int64)
        if offsets.size == 0:
            offsets = np.zeros(1, np.int64)
        if offsets[0] != 0 or bool(np.any(np.diff(offsets) < 0)):
            raise CorruptFileError(self.path, f"batch offsets {offsets.tolist()} do not ascend from 0")
        self.batch_offsets = offsets
        self.num_batches = int(offsets.size - 1)
        self.num_rows = int(offsets[-1])
        self.num_columns = 0  # legacy files have no v2 columns (DataFile.column_indices is empty)
        if not self.metadata.manifest_position:
            raise CorruptFileError(self.path, "legacy file without its embedded schema is not supported")
        manifest = _read_prefixed(self.io, int(self.metadata.manifest_position), table_pb2.Manifest(), self.path, "Manifest")
        self.fields = {int(f.id): f for f in manifest.fields}
        self.descriptor = file_pb2.FileDescriptor(length=self.num_rows)
        self.descriptor.schema.fields.extend(manifest.fields)
        self.descriptor.schema.metadata.update(dict(manifest.schema_metadata))
        self._pages = self._read_page_table()

    def _read_page_table(self) -> np.ndarray:
        """The ``[field id - min id][batch][position, length]`` int64 page table."""
        self.min_field_id = min(self.fields, default=0)
        if not self.fields or self.num_batches == 0:
            return np.zeros((0, 0, 2), np.int64)
        span = max(self.fields) - self.min_field_id + 1
        size = span * self.num_batches * 16
        pos = int(self.metadata.page_table_position)
        if pos + size > self.io.size:
            raise CorruptFileError(self.path, f"page table of {size} bytes at {pos} runs past the end of the file")
        return np.frombuffer(self.io.read(pos, size).tobytes(), "<i8").reshape(span, self.num_batches, 2)

    def page(self, field_id: int, batch: int) -> _Page:
        k = field_id - self.min_field_id
        if not 0 <= k < self._pages.shape[0]:
            raise CorruptFileError(self.path, f"field id {field_id} has no row in the page table")
        pos, length = (int(x) for x in self._pages[k, batch])
        if pos < 0 or length < 0 or pos > self.io.size:
            raise CorruptFileError(self.path, f"page of field {field_id}, batch {batch} lies outside the file")
        return _Page(pos, length)

    def read(self, pos: int, size: int) -> np.ndarray:
        if size == 0:
            return np.zeros(0, np.uint8)
        if pos < 0 or pos + size > self.io.size:
            raise CorruptFileError(self.path, f"{size} bytes at {pos} run past the end of the file")
        return self.io.read(pos, size)

    def prefetch(self, columns: list[int]) -> None:
        """Nothing to do: pages are read when decoded."""

    def close(self) -> None:
        self.io.close()

    # -- decoding ------------------------------------------------------------------------------

    def read_field(self, arrow_field: pa.Field, field_ids: list[int], rows: np.ndarray | None = None) -> pa.Array:
        """One top-level field, all rows or the sorted physical ``rows``.

        ``field_ids``: the ids of the field and its descendants in depth-first pre-order
        (the shape of ``arrow_field``'s type)."""
        if rows is not None and rows.size == 0:
            return pa.array([], arrow_field.type)
        if isinstance(arrow_field.type, pa.BaseExtensionType):  # decoded as its stored type, then wrapped
            stored = arrow_field.with_type(_stored_type(arrow_field.type))
            return self._wrap(arrow_field.type, self.read_field(stored, field_ids, rows))
        rows_batch = None
        if rows is None:
            batches = np.arange(self.num_batches)
        else:  # only the batches holding a selected row
            rows_batch = np.searchsorted(self.batch_offsets, rows, side="right") - 1
            batches = np.unique(rows_batch)
        whole = self._read_flat(arrow_field, field_ids, batches)
        if whole is not None:
            return self._select(whole, rows, batches, rows_batch)
        pieces = []
        for b in batches.tolist():
            n = int(self.batch_offsets[b + 1] - self.batch_offsets[b])
            ids = iter(field_ids)
            try:
                pieces.append(self._decode(arrow_field.type, arrow_field.nullable, ids, b, n))
            except (ValueError, IndexError, pa.ArrowException) as exc:
                if isinstance(exc, CorruptFileError):
                    raise
                raise CorruptFileError(self.path, f"field {arrow_field.name!r}, batch {b}: {exc}") from exc
        arr = pa.concat_arrays(pieces) if pieces else pa.array([], arrow_field.type)
        return self._select(arr, rows, batches, rows_batch)

    def _select(self, arr: pa.Array, rows: np.ndarray | None, batches: np.ndarray,
                rows_batch: np.ndarray | None) -> pa.Array:
        """The sorted physical ``rows`` (in batches ``rows_batch``) of ``arr``, the rows of
        ``batches`` back to back (``rows`` None: all of them)."""
        if rows is None or rows_batch is None:
            return arr
        counts = self.batch_offsets[batches + 1] - self.batch_offsets[batches]
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))  # where each batch begins in arr
        where = starts[np.searchsorted(batches, rows_batch)] + (np.asarray(rows, np.int64) - self.batch_offsets[rows_batch])
        if where.size == len(arr) and bool(np.all(where == np.arange(len(arr)))):
            return arr
        return arr.take(pa.array(where))

    def _gather(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The byte ranges ``[starts[i], starts[i] + lengths[i])`` back to back."""
        if starts.size and (int(starts.min()) < 0 or int((starts + lengths).max()) > self.io.size):
            raise CorruptFileError(self.path, "pages lie outside the file")
        whole = getattr(self.io, "mapped", None)
        if whole is not None:
            return native.gather_ranges(whole, starts.astype(np.int64), lengths.astype(np.int64))
        keep = lengths > 0
        blocks = self.io.read_ranges(list(zip(starts[keep].tolist(), lengths[keep].tolist(), strict=True)))
        return np.concatenate(blocks) if blocks else np.zeros(0, np.uint8)

    def _column_pages(self, fid: int, batches: np.ndarray) -> np.ndarray:
        """``[batch][position, length]`` of field ``fid``'s pages in ``batches``."""
        k = fid - self.min_field_id
        if not 0 <= k < self._pages.shape[0]:
            raise CorruptFileError(self.path, f"field id {fid} has no row in the page table")
        return self._pages[k, batches]

    def _read_flat(self, field: pa.Field, field_ids: list[int], batches: np.ndarray) -> pa.Array | None:
        """The ``batches`` (ascending) of a field of fixed-width values other than bools
        (fixed-size lists of them too), strings or binaries, or a list of fixed-width values,
        in one gather of its pages (two for lists); None for other fields (decoded batch by
        batch)."""
        if batches.size == 0:
            return None
        counts = self.batch_offsets[batches + 1] - self.batch_offsets[batches]
        t = field.type
        if (pa.types.is_list(t) or pa.types.is_large_list(t)) and len(field_ids) == 2:
            return self._read_flat_list(t, field_ids, batches, counts)
        if len(field_ids) != 1:
            return None
        fid = field_ids[0]
        positions = self._column_pages(fid, batches)[:, 0]
        n = int(counts.sum())
        if _is_var_binary(t):
            ends = self._gather(positions, (counts + 1) * 8).view("<i8")
            heads = np.concatenate(([0], np.cumsum(counts + 1)[:-1]))
            starts, stops = ends[heads], ends[heads + counts]
            if bool(np.any(stops < starts)) or bool(np.any(np.diff(ends) < 0) and not _ascending_runs(ends, heads, counts)):
                raise CorruptFileError(self.path, f"var-binary positions of field {fid} do not ascend")
            values = self._gather(starts, stops - starts)
            # per batch: its positions less its first, shifted by the bytes of the batches before
            shift = np.concatenate(([0], np.cumsum(stops - starts)[:-1])) - starts
            keep = np.ones(ends.size, bool)
            keep[heads[1:]] = False  # a batch's first position is the previous batch's end
            rel = ends + np.repeat(shift, counts + 1)
            offsets = rel[keep]
            large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
            validity = None
            if field.nullable:
                valid = np.diff(offsets) > 0
                if not bool(valid.all()):
                    validity = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
            offsets = offsets.astype(np.int64 if large else np.int32)
            return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(offsets), pa.py_buffer(values)])
        width = _plain_width(t)
        if width is None:
            return None
        data = self._gather(positions, counts * width)
        return _plain_array(t, n, data)

    def _read_flat_list(self, t: pa.DataType, field_ids: list[int], batches: np.ndarray,
                        counts: np.ndarray) -> pa.Array | None:
        """A list of fixed-width values, its ``batches``: the offsets pages (each
        from 0) joined into one offsets array, the item pages gathered."""
        width = _plain_width(t.value_type)
        if width is None:
            return None
        large = pa.types.is_large_list(t)
        size = 8 if large else 4
        heads_pages = self._column_pages(field_ids[0], batches)
        raw = self._gather(heads_pages[:, 0], (counts + 1) * size).view(f"<i{size}").astype(np.int64)
        heads = np.concatenate(([0], np.cumsum(counts + 1)[:-1]))
        items = raw[heads + counts]  # items per batch: each batch's last offset
        if bool(np.any(raw[heads] != 0)) or not _ascending_runs(raw, heads, counts) or bool(np.any(items < 0)):
            raise CorruptFileError(self.path, f"list offsets of field {field_ids[0]} do not ascend from 0")
        keep = np.ones(raw.size, bool)
        keep[heads[1:]] = False
        offsets = (raw + np.repeat(np.concatenate(([0], np.cumsum(items)[:-1])), counts + 1))[keep]
        child_positions = self._column_pages(field_ids[1], batches)[:, 0]
        values = _plain_array(t.value_type, int(items.sum()), self._gather(child_positions, items * width))
        cls = pa.LargeListArray if large else pa.ListArray
        return cls.from_arrays(pa.array(offsets.astype(np.int64 if large else np.int32)), values, type=t)

    def _wrap(self, t: pa.BaseExtensionType, stored: pa.Array) -> pa.Array:
        """An array of extension type ``t`` from what its stored type decoded (JSON columns
        are stored as JSONB documents, :mod:`lance_gpu.file.jsonb`)."""
        if getattr(t, "extension_name", None) == "arrow.json":
            return pa.ExtensionArray.from_storage(t, jsonb_to_text(stored, self.path).cast(t.storage_type))
        return pa.ExtensionArray.from_storage(t, stored)

    def _decode(self, t: pa.DataType, nullable: bool, ids, batch: int, n: int) -> pa.Array:
        if isinstance(t, pa.BaseExtensionType):
            return self._wrap(t, self._decode(_stored_type(t), nullable, ids, batch, n))
        fid = next(ids)
        if pa.types.is_struct(t):
            children = [self._decode(t.field(i).type, t.field(i).nullable, ids, batch, n) for i in range(t.num_fields)]
            return pa.StructArray.from_arrays(children, fields=list(t))
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            page = self.page(fid, batch)
            width = 8 if pa.types.is_large_list(t) else 4
            offsets = np.frombuffer(self.read(page.position, (n + 1) * width).tobytes(), f"<i{width}")
            if n and (offsets[0] != 0 or bool(np.any(np.diff(offsets) < 0))):
                raise CorruptFileError(self.path, f"list offsets of field {fid}, batch {batch} do not ascend from 0")
            child = self._decode(t.value_type, t.value_field.nullable, ids, batch, int(offsets[-1]) if n else 0)
            cls = pa.LargeListArray if width == 8 else pa.ListArray
            return cls.from_arrays(pa.array(offsets), child, type=t)
        page = self.page(fid, batch)
        if pa.types.is_null(t):
            return pa.nulls(n)
        if pa.types.is_dictionary(t):
            indices = self._fixed(t.index_type, page.position, n)
            return pa.DictionaryArray.from_arrays(indices, self.dictionary(fid, t.value_type))
        if _is_var_binary(t):
            return self._var_binary(t, nullable, page.position, n)
        return self._fixed(t, page.position, n)

    def _fixed(self, t: pa.DataType, pos: int, n: int) -> pa.Array:
        """``n`` plain-encoded fixed-stride values at ``pos`` (no validity)."""
        if pa.types.is_fixed_size_list(t):
            child = self._fixed(t.value_type, pos, n * t.list_size)
            return pa.FixedSizeListArray.from_arrays(child, type=t)
        if pa.types.is_boolean(t):
            data = self.read(pos, (n + 7) // 8)
            return pa.Array.from_buffers(t, n, [None, pa.py_buffer(data.tobytes())])
        width = t.bit_width // 8 if hasattr(t, "bit_width") else 0
        if pa.types.is_fixed_size_binary(t) or pa.types.is_decimal(t):
            width = t.byte_width
        if width <= 0:
            raise CorruptFileError(self.path, f"type {t} is not stored by legacy files")
        data = self.read(pos, n * width)
        return pa.Array.from_buffers(t, n, [None, pa.py_buffer(data.tobytes())])

    def _var_binary(self, t: pa.DataType, nullable: bool, pos: int, n: int) -> pa.Array:
        """``n`` var-binary values whose ``n + 1`` absolute int64 positions are at ``pos``."""
        positions = np.frombuffer(self.read(pos, (n + 1) * 8).tobytes(), "<i8")
        start, stop = int(positions[0]), int(positions[-1])
        if bool(np.any(np.diff(positions) < 0)) or start < 0 or stop > pos:
            raise CorruptFileError(self.path, "var-binary positions do not ascend within the file")
        values = self.read(start, stop - start).tobytes()
        rel = positions - start
        large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        offsets = rel.astype(np.int64 if large else np.int32)
        validity = None
        if nullable:
            valid = np.diff(positions) > 0
            if not bool(valid.all()):
                validity = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
        return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(values)])

    def dictionary(self, field_id: int, value_type: pa.DataType) -> pa.Array:
        """The dictionary values of field ``field_id`` (of type ``value_type``)."""
        pb = self.fields.get(field_id)
        if pb is None or not pb.HasField("dictionary"):
            raise CorruptFileError(self.path, f"dictionary field {field_id} names no dictionary values")
        pos, n = int(pb.dictionary.offset), int(pb.dictionary.length)
        if pa.types.is_string(value_type) or pa.types.is_binary(value_type) or pa.types.is_large_string(value_type) \
                or pa.types.is_large_binary(value_type):
            return self._var_binary(value_type, False, pos, n)
        return self._fixed(value_type, pos, n)


def _is_var_binary(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t)


def _plain_width(t: pa.DataType) -> int | None:
    """Bytes a value of a fixed-width type other than bool (or a fixed-size list of one)
    takes; None else."""
    if pa.types.is_fixed_size_list(t):
        inner = _plain_width(t.value_type)
        return None if inner is None else inner * t.list_size
    if pa.types.is_fixed_size_binary(t) or pa.types.is_decimal(t):
        return int(t.byte_width)
    if pa.types.is_boolean(t) or pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_null(t):
        return None
    try:
        bits = t.bit_width
    except ValueError:
        return None
    return bits // 8 if bits % 8 == 0 else None


def _ascending_runs(ends: np.ndarray, heads: np.ndarray, counts: np.ndarray) -> bool:
    """Whether every batch's run of positions ascends (runs of different batches may not)."""
    steps = np.diff(ends)
    inside = np.ones(steps.size, bool)
    inside[heads[1:] - 1] = False  # the step from one batch's last position to the next's first
    return not bool(np.any(steps[inside] < 0))


def _plain_array(t: pa.DataType, n: int, data: np.ndarray) -> pa.Array:
    """``n`` values of fixed width (:func:`_plain_width`) stored back to back in ``data``."""
    if pa.types.is_fixed_size_list(t):
        return pa.FixedSizeListArray.from_arrays(_plain_array(t.value_type, n * t.list_size, data), type=t)
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(data)])


def _stored_type(t: pa.BaseExtensionType) -> pa.DataType:
    """What a legacy file stores for extension type ``t``: JSONB documents (large binary)
    for ``arrow.json``, else its storage type."""
    return pa.large_binary() if getattr(t, "extension_name", None) == "arrow.json" else t.storage_type
