# SPDX-License-Identifier: Apache-2.0
"""Write legacy (v1, ``data_storage_version="legacy"`` / ``"0.1"``) Lance data files.

The byte layout is :mod:`lance_gpu.file.legacy`'s (which reads it); written as pylance
14.0.2's legacy writer writes it: rows are grouped into batches of ``rows_per_batch`` rows
(pylance's ``max_rows_per_group``; the file's last batch holds the rest), each batch's pages
written field by field in depth-first pre-order with no padding, then the page table, the
dictionary values, the embedded schema (a ``lance.table.Manifest`` with only fields, schema
metadata, version 1, writer version and data format 0.1), the ``lance.file.Metadata`` and the
16-byte footer.  The pages and page table are byte for byte pylance's; pylance also writes
per-batch column statistics (``Metadata.statistics``), which this writer leaves out (they are
optional: pylance reads files without them).

Like pylance's legacy writer, this stores no validity for fixed-width values (a null is
written as the value bytes under it, which read back as values), nor for lists (a null list
is written empty) and structs; a null string or binary reads back as null only because it
is empty.
"""

from __future__ import annotations

import os
import struct as _struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu._proto import file_pb2, table_pb2
from lance_gpu.errors import IncompatibleSchemaError, LegacyFormatError, SchemaMismatchError
from lance_gpu.file.container import MAGIC
from lance_gpu.file.legacy import LEGACY_MAJOR, LEGACY_MINOR
from lance_gpu.io.resolve import resolve
from lance_gpu.io.store import ObjectStore, WriteHandle
from lance_gpu.table.schema import LanceField, LanceSchema
from lance_gpu.txn.publish import WRITER_LIBRARY, WRITER_VERSION
from lance_gpu.write._jsonb import text_to_jsonb

#: The ``data_format.version`` pylance writes for legacy datasets.
LEGACY_STORAGE_VERSION = "0.1"
#: pylance's default ``max_rows_per_group``: rows per batch of a legacy file.
DEFAULT_ROWS_PER_BATCH = 1024


def _is_var_binary(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t)


def check_legacy_types(schema: LanceSchema) -> None:
    """Refuse what pylance's legacy writer cannot write, with pylance's builtin (OSError):
    maps, and a schema with no page at all (only empty structs).  (Dictionary values go to
    the data file here and to every manifest file at commit:
    :mod:`lance_gpu.txn.legacy_dictionaries`.)"""
    for f in schema.walk():
        if f.logical_type == "map":
            raise LegacyFormatError(
                f"field {f.dotted_path!r}: legacy (0.1) files cannot store map columns (FileWriter::write: unsupported data type)"
            )
    if not any(f.is_leaf and f.logical_type != "struct" for f in schema.walk()):
        raise LegacyFormatError("legacy (0.1) files need at least one non-struct field (empty page table)")


class LegacyFileWriter:
    """Streams record batches of ``schema`` (the dataset's Lance schema, field ids
    included; batches have its top-level fields in order) into one legacy data file.

    The interface is :class:`~lance_gpu.write.file_writer.LanceFileWriter`'s as the dataset
    writer uses it: :meth:`write`, :meth:`flush`, :meth:`finish`, :meth:`sync_close`,
    :meth:`abort`, ``num_rows``, ``bytes_written``, ``encoding``.
    """

    def __init__(self, path: str | os.PathLike[str], schema: LanceSchema, rows_per_batch: int = DEFAULT_ROWS_PER_BATCH,
                 store: ObjectStore | None = None, dictionaries: dict[int, pa.Array] | None = None,
                 dataset_dictionaries: frozenset[int] = frozenset()) -> None:
        """``dictionaries``: the values each dictionary field (by id) is encoded with,
        shared by the files of one write so that they all hold the values the manifest
        names; a field missing there takes its first batch's dictionary (and adds it), and
        later batches with other dictionaries are re-encoded with it (pylance keeps their
        indices, pointing at the wrong values), refused only where a value is missing from
        it.  ``dataset_dictionaries``: the fields whose values are the dataset's (an append):
        data with another dictionary is refused as pylance refuses it
        (:class:`~lance_gpu.errors.IncompatibleSchemaError`, an ``OSError``)."""
        if rows_per_batch < 1:
            raise ValueError("max_rows_per_group must be positive")
        if store is None:
            store, path = resolve(path)
        self.store = store
        self.path = os.fspath(path)
        self.schema = schema
        self.rows_per_batch = int(rows_per_batch)
        self._fh: WriteHandle = store.open_writer(self.path)
        self._pos = 0
        self._closed = False
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._batch_offsets = [0]
        self._pages: dict[int, dict[int, tuple[int, int]]] = {}  # field id -> batch -> (position, length)
        self._dictionaries: dict[int, pa.Array] = {} if dictionaries is None else dictionaries
        self._dataset_dictionaries = dataset_dictionaries
        self.num_rows = 0

    @property
    def bytes_written(self) -> int:
        return self._pos + self._pending_bytes

    @property
    def bytes_flushed(self) -> int:
        """Bytes of the batches written so far (pylance's ``tell()``), without the rows
        still buffered for the next batch."""
        return self._pos

    @property
    def encoding(self) -> bool:
        """Pages are written synchronously: nothing is ever queued."""
        return False

    def write(self, batch: pa.RecordBatch | pa.Table | object) -> None:
        """Append the rows of ``batch``; full batches of ``rows_per_batch`` rows are written."""
        to_arrow = getattr(batch, "to_arrow", None)
        if to_arrow is not None and not isinstance(batch, (pa.RecordBatch, pa.Table)):
            batch = to_arrow()  # a device batch: legacy pages are written from the host
        assert isinstance(batch, (pa.RecordBatch, pa.Table))
        if batch.num_columns != len(self.schema.fields):
            raise ValueError(f"batch has {batch.num_columns} columns, the schema {len(self.schema.fields)}")
        if isinstance(batch, pa.Table):
            for rb in batch.to_batches():
                self.write(rb)
            return
        if batch.num_rows == 0:
            return
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        self._pending_bytes += batch.nbytes
        self.num_rows += batch.num_rows
        if self._pending_rows >= self.rows_per_batch:
            table = pa.Table.from_batches(self._pending)
            start = 0
            while self._pending_rows - start >= self.rows_per_batch:
                self._write_batch(table.slice(start, self.rows_per_batch))
                start += self.rows_per_batch
            rest = table.slice(start)  # zero-copy views of the rows left
            self._pending = rest.to_batches() if rest.num_rows else []
            self._pending_rows = rest.num_rows
            self._pending_bytes = sum(b.nbytes for b in self._pending)

    def flush(self) -> None:
        """Write the rows still buffered as the file's last (short) batch."""
        if self._pending_rows:
            self._write_batch(pa.Table.from_batches(self._pending))
            self._pending, self._pending_rows, self._pending_bytes = [], 0, 0

    def _write_batch(self, head: pa.Table) -> None:
        """Write the rows of ``head`` as the file's next batch."""
        batch_id = len(self._batch_offsets) - 1
        for field, column in zip(self.schema.fields, head.columns, strict=True):
            arr = column.chunk(0) if column.num_chunks == 1 else pa.concat_arrays(column.chunks)
            self._write_array(field, arr, batch_id)
        self._batch_offsets.append(self._batch_offsets[-1] + head.num_rows)

    # -- pages -------------------------------------------------------------------------------

    def _write(self, data: bytes | memoryview) -> int:
        pos = self._pos
        view = memoryview(data)
        if view.nbytes:
            self._fh.write(view)
            self._pos += view.nbytes
        return pos

    def _set_page(self, field: LanceField, batch_id: int, position: int, length: int) -> None:
        self._pages.setdefault(field.id, {})[batch_id] = (position, length)

    def _write_array(self, field: LanceField, arr: pa.Array, batch_id: int) -> None:
        t = arr.type
        if isinstance(t, pa.BaseExtensionType):
            if field.logical_type == "json":  # stored as JSONB documents, as pylance stores them
                arr = text_to_jsonb(arr.storage, field.dotted_path)
            else:
                arr = arr.storage
            t = arr.type
        if pa.types.is_null(t):
            self._set_page(field, batch_id, self._pos, len(arr))
        elif pa.types.is_struct(t):
            for i, child in enumerate(field.children):
                self._write_array(child, arr.field(i), batch_id)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            offsets = np.asarray(arr.offsets)
            width = 8 if pa.types.is_large_list(t) else 4
            rel = (offsets - offsets[0]).astype(f"<i{width}")
            self._set_page(field, batch_id, self._write(rel.tobytes()), len(rel))
            values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
            self._write_array(field.children[0], values, batch_id)
        elif _is_var_binary(t):
            self._set_page(field, batch_id, self._var_binary(arr), len(arr))
        elif pa.types.is_dictionary(t):
            expected = self._dictionaries.setdefault(field.id, arr.dictionary)
            if not arr.dictionary.equals(expected):
                arr = self._reencode(field, arr, expected)
            self._set_page(field, batch_id, self._write(_fixed_bytes(arr.indices)), len(arr))
        elif pa.types.is_map(t) or pa.types.is_union(t):
            raise LegacyFormatError(f"field {field.dotted_path!r}: legacy (0.1) files cannot store {t}")
        else:
            self._set_page(field, batch_id, self._write(_fixed_bytes(arr)), len(arr))

    def _reencode(self, field: LanceField, arr: pa.DictionaryArray, expected: pa.Array) -> pa.DictionaryArray:
        """``arr`` with indices into ``expected`` (the dictionary this write uses)."""
        if field.id not in self._dataset_dictionaries:
            values = arr.dictionary.take(arr.indices)
            positions = pc.index_in(values, value_set=expected)
            if positions.null_count == values.null_count:
                return pa.DictionaryArray.from_arrays(positions.cast(arr.type.index_type), expected)
            raise IncompatibleSchemaError(
                f"field {field.dotted_path!r}: a batch holds values missing from the dictionary of the first one; "
                "legacy (0.1) files of one dataset share one dictionary"
            )
        raise IncompatibleSchemaError(
            f"Append with different schema: dictionary for `{field.dotted_path}` did not match expected dictionary"
        )

    def _var_binary(self, arr: pa.Array) -> int:
        """Write the values, then their ``n + 1`` absolute int64 positions; returns where
        the positions begin (the page position)."""
        large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
        bufs = arr.buffers()
        offsets = np.frombuffer(bufs[1], np.int64 if large else np.int32, len(arr) + 1, arr.offset * (8 if large else 4))
        start, stop = int(offsets[0]), int(offsets[-1])
        data = memoryview(bufs[2])[start:stop] if bufs[2] is not None else memoryview(b"")
        values_pos = self._write(data)
        positions = (offsets.astype(np.int64) - start + values_pos).astype("<i8")
        return self._write(positions.tobytes())

    # -- finishing ---------------------------------------------------------------------------

    def finish(self, sync: bool = True) -> int:
        """Write the last batch, page table, dictionaries, embedded schema, metadata and
        footer; returns the file size."""
        self.flush()
        ids = self.schema.field_ids
        metadata = file_pb2.Metadata(batch_offsets=self._batch_offsets)
        if self._pages:
            low, high = min(ids), max(self._pages)
            num_batches = len(self._batch_offsets) - 1
            table = np.zeros((high - low + 1, num_batches, 2), "<i8")
            for fid, pages in self._pages.items():
                for b, (pos, length) in pages.items():
                    table[fid - low, b] = (pos, length)
            metadata.page_table_position = self._write(table.tobytes())
        fields = self.schema.to_protos()
        for pb in fields:
            values = self._dictionaries.get(int(pb.id))
            if values is not None:
                pos = self._var_binary(values) if _is_var_binary(values.type) else self._write(_fixed_bytes(values))
                pb.dictionary.offset = pos
                pb.dictionary.length = len(values)
        manifest = table_pb2.Manifest(fields=fields, schema_metadata=self.schema.metadata, version=1)
        manifest.writer_version.library = WRITER_LIBRARY
        manifest.writer_version.version = WRITER_VERSION
        manifest.data_format.file_format = "lance"
        manifest.data_format.version = LEGACY_STORAGE_VERSION
        metadata.manifest_position = self._write_prefixed(manifest.SerializeToString())
        meta_pos = self._write_prefixed(metadata.SerializeToString())
        self._write(_struct.pack("<qHH4s", meta_pos, LEGACY_MAJOR, LEGACY_MINOR, MAGIC))
        if sync:
            self.sync_close()
        return self._pos

    def _write_prefixed(self, raw: bytes) -> int:
        pos = self._write(_struct.pack("<I", len(raw)))
        self._write(raw)
        return pos

    def sync_close(self, sync: bool = True) -> None:
        """Publish the finished file (as :meth:`LanceFileWriter.sync_close`)."""
        if not self._closed:
            self._closed = True
            self._fh.close(sync)

    def abort(self) -> None:
        """Drop the partial file (its staging file, or the object if already published)."""
        if not self._closed:
            self._closed = True
            self._fh.abort()
        else:
            self.store.delete(self.path)


def _fixed_bytes(arr: pa.Array) -> bytes:
    """The plain page of fixed-stride values: the value bytes of the array's rows (bools
    bit-packed from bit 0; fixed-size lists their items', flattened), without validity."""
    t = arr.type
    if isinstance(t, pa.BaseExtensionType):
        arr, t = arr.storage, t.storage_type
    n = len(arr)
    if pa.types.is_fixed_size_list(t):
        values = arr.values.slice(arr.offset * t.list_size, n * t.list_size)
        return _fixed_bytes(values)
    if pa.types.is_boolean(t):
        if n == 0:
            return b""
        bits = np.unpackbits(np.frombuffer(arr.buffers()[1], np.uint8), bitorder="little")[arr.offset : arr.offset + n]
        return np.packbits(bits, bitorder="little").tobytes()
    if pa.types.is_fixed_size_binary(t) or pa.types.is_decimal(t):
        width = t.byte_width
    else:
        try:
            width = t.bit_width // 8
        except ValueError:
            raise SchemaMismatchError(f"type {t} cannot be stored in a legacy (0.1) file") from None
    buf = arr.buffers()[1]
    if buf is None:
        return bytes(n * width)
    return memoryview(buf)[arr.offset * width : (arr.offset + n) * width].tobytes()
