# SPDX-License-Identifier: Apache-2.0
"""Writing one Lance v2 data file (file versions 2.0, 2.1 and 2.2).

Layout (see :mod:`lance_gpu.file.container`): page buffers, each starting on a 64-byte
boundary, written as pages are encoded; then global buffer 0 (``FileDescriptor{schema,
length}``, 64-byte aligned); the column metadata (one ``ColumnMetadata`` per leaf column,
back to back, column encoding ``Any(/lance.encodings.ColumnEncoding, values{})``, pages as
``Any(/lance.encodings21.PageLayout)``, in 2.0 files ``Any(/lance.encodings.ArrayEncoding)``
from :mod:`lance_gpu.file.writer.pages_v2_0`, whose footer says 0.3); the column-metadata and global-buffer offset tables;
and the 40-byte footer.

This writer encodes Arrow (host) arrays on the CPU, on a pool of encoder threads.  The write
layer's :class:`lance_gpu.write.file_writer.LanceFileWriter` extends it with device columns
encoded by GPU kernels, through the hooks :meth:`HostFileWriter._host_column`,
:meth:`~HostFileWriter._nbytes`, :meth:`~HostFileWriter._slice` and
:meth:`~HostFileWriter._encode_now`; a page buffer may also be a :class:`PendingBuffer` (a
device buffer on its way to the host), waited for when the page is written.

Blob fields (:mod:`lance_gpu.file.writer.blobs`) write their values' bytes when their page is
flushed and store descriptors in the column.  Batches are buffered per top-level field and encoded into one page (all leaves of the field
cut at the same rows) once a field holds :data:`PAGE_BYTES` of Arrow data, or when the
file is finished; rows whose rep / def levels overflow a mini-block chunk's u16 level count
(long runs of empty lists) are split over more pages.  Only the column metadata stays in memory after a page is written.
"""

from __future__ import annotations

import functools
import itertools
import os
import struct
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol, runtime_checkable

import numpy as np
import pyarrow as pa
from google.protobuf.any_pb2 import Any

from lance_gpu._proto import encodings_v2_0_pb2, file2_pb2, file_pb2
from lance_gpu.errors import UnsupportedFeatureError
from lance_gpu.file.writer.blobs import column_field_ids, encode_blob_page, v2_0_blob_column_encoding
from lance_gpu.file.writer.pages import EncodedPage, LevelOverflow, encode_leaf
from lance_gpu.file.writer.pages_v2_0 import encode_field_v2_0
from lance_gpu.file.writer.shred import shred
from lance_gpu.io.background import ProcessPool, done_now
from lance_gpu.io.resolve import resolve
from lance_gpu.io.store import ObjectStore, WriteHandle
from lance_gpu.table.blob_descriptions import blob_kind
from lance_gpu.table.schema import LanceField, LanceSchema

__all__ = [
    "ALIGNMENT",
    "PAGE_BYTES",
    "HostFileWriter",
    "PendingBuffer",
    "check_writable_types",
    "encode_field_rows",
    "encode_threads",
]

#: Pieces of a file smaller than this (pages' buffers, pads, metadata) are gathered and
#: written together, up to this many bytes at a time.
GATHER_BYTES = 256 * 1024
_ZEROS = bytes(64)
#: Arrow bytes of one field buffered before they are encoded as a page.
PAGE_BYTES = 8 * 1024 * 1024
#: Every buffer starts on a multiple of this.
ALIGNMENT = 64
PAGE_LAYOUT_URL = "/lance.encodings21.PageLayout"
ARRAY_ENCODING_URL = "/lance.encodings.ArrayEncoding"
COLUMN_ENCODING_URL = "/lance.encodings.ColumnEncoding"
MAGIC = b"LANC"


def _pool() -> ThreadPoolExecutor:
    """The process-wide page-encoding pool (:func:`encode_threads` threads; the encoders'
    numba kernels release the GIL), started afresh in a forked child."""
    return _ENCODE_POOL.get()


def encode_threads() -> int:
    """Page-encoding threads: ``$LANCE_GPU_ENCODE_THREADS`` if set, else two per CPU.

    Two per CPU because an encoder thread also waits (the GIL in the Python glue between
    kernels, page faults on fresh buffers): with one per CPU a core idles meanwhile, and on
    a machine shared with other jobs the encoders get less than their share of it.  Pages
    are written in submission order, so the bytes do not depend on the count.  Measured on
    the shared 2-core machine (``bench_write_ops.py --ops write_fragments+commit``, four
    alternating pairs at load 5-11): 2 threads 0.64-1.11x pylance, 4 threads 0.91-1.42x,
    4 better in every pair."""
    raw = os.environ.get("LANCE_GPU_ENCODE_THREADS", "")
    if raw.strip().isdigit() and int(raw) > 0:
        return int(raw)
    return 2 * max(1, os.cpu_count() or 1)


_ENCODE_POOL = ProcessPool(encode_threads, "lance-gpu-encode")


@runtime_checkable
class PendingBuffer(Protocol):
    """A page buffer not on the host yet (a device buffer being copied): :meth:`result`
    waits for its bytes."""

    def result(self) -> np.ndarray: ...


def check_writable_types(schema: LanceSchema, minor: int) -> None:
    """Raise :class:`~lance_gpu.errors.UnsupportedFeatureError` for a field file version
    2.``minor`` cannot store (maps before 2.2, JSON below the top level, fixed-size lists of
    structs), as pylance refuses them."""
    for f in schema.walk():
        if f.logical_type == "map" and minor < 2:
            raise UnsupportedFeatureError(f"field {f.dotted_path!r}: map columns need data_storage_version 2.2")
        if f.logical_type == "json" and f.parent_id != -1:
            raise UnsupportedFeatureError(f"field {f.dotted_path!r}: arrow.json columns can only be top-level fields")
        if f.logical_type.startswith("fixed_size_list:struct"):
            raise UnsupportedFeatureError(f"field {f.dotted_path!r}: fixed-size lists of structs cannot be written")


def encode_field_rows(arrays: Sequence[pa.Array], field: LanceField, minor: int) -> list[tuple[int, EncodedPage, int]]:
    """Encode buffered Arrow arrays of one top-level field: ``(column index within the field,
    page, row offset)`` in write order (2.1+: one page per leaf; rows whose levels overflow a
    page are split in halves; 2.0: one page per column, parents included)."""
    arr = arrays[0] if len(arrays) == 1 else _concat(list(arrays))
    if minor == 0:
        return [(k, page, 0) for k, page in encode_field_v2_0(arr, field)]
    out: list[tuple[int, EncodedPage, int]] = []
    _encode_rows(arr, 0, field, minor, out)
    return out


def _encode_rows(a: pa.Array, first: int, field: LanceField, minor: int, out: list[tuple[int, EncodedPage, int]]) -> None:
    """Append ``(column k, page, first row)`` of the rows of ``a`` (row ``first`` of the field)
    to ``out``; split in halves while their levels overflow (module level: a recursive
    closure would leave a reference cycle per field written)."""
    try:
        pages = [encode_leaf(leaf, minor) for leaf in shred(a, field)]
    except LevelOverflow:
        if len(a) < 2:
            raise
        half = len(a) // 2
        _encode_rows(a.slice(0, half), first, field, minor, out)
        _encode_rows(a.slice(half), first + half, field, minor, out)
        return
    for k, page in enumerate(pages):
        out.append((k, page, first))


def _file_columns(schema: LanceSchema, minor: int) -> tuple[list[int], list[bool]]:
    """Per top-level field of ``schema``, in a 2.``minor`` file: its first column (and, last,
    the number of columns) and whether it is a blob field (what every writer of the schema
    asks: :meth:`LanceSchema.derived` keeps it)."""
    first = [0]
    for top in schema.fields:
        first.append(first[-1] + len(column_field_ids(LanceSchema([top], {}), minor)))
    return first, [bool(blob_kind(top)) for top in schema.fields]


def _any(url: str, msg) -> file2_pb2.Encoding:
    wrapped = Any(type_url=url, value=msg.SerializeToString())
    return file2_pb2.Encoding(direct=file2_pb2.DirectEncoding(encoding=wrapped.SerializeToString()))


@functools.cache
def _column_encoding(blob: bool) -> file2_pb2.Encoding:
    """Every column's ``ColumnMetadata.encoding`` (``values{}``; a 2.0 blob column's
    ``blob{inner: values{}}``), built once: callers copy it into their messages, never change it."""
    return _any(COLUMN_ENCODING_URL, v2_0_blob_column_encoding() if blob else encodings_v2_0_pb2.ColumnEncoding(values={}))


#: Pages of fewer Arrow bytes than this are encoded by the writing thread, not the pool.
INLINE_ENCODE_BELOW = 64 * 1024


class HostFileWriter:
    """Streams record batches of ``schema`` into one data file at ``path``.

    ``schema`` is the dataset's Lance schema (field ids included); the Arrow batches must
    have its fields in order.  :meth:`finish` writes the metadata and returns the file size.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: LanceSchema,
        minor: int,
        page_bytes: int | None = None,
        store: ObjectStore | None = None,
    ) -> None:
        """Write the new object ``path`` of ``store`` (None: the local file system, ``path``
        a file path).  The object appears only when :meth:`finish` closes it."""
        if minor not in (0, 1, 2):
            raise ValueError(f"can only write file versions 2.0, 2.1 and 2.2, not 2.{minor}")
        if store is None:

            store, path = resolve(path)
        self.store = store
        self.path = os.fspath(path)
        self.schema = schema
        self.minor = minor
        self.page_bytes = PAGE_BYTES if page_bytes is None else page_bytes
        self._fh: WriteHandle = store.open_writer(self.path)
        self._pos = 0  # bytes of the file so far, gathered ones included
        self._gathered: list[bytes | memoryview] = []  # small pieces not written yet (_put)
        self._gathered_bytes = 0
        self._fields = list(schema.fields)
        self._first_col, self._blob = schema.derived(("file columns", minor), lambda: _file_columns(schema, minor))
        self._columns: list[list[file2_pb2.ColumnMetadata.Page]] = [[] for _ in range(self._first_col[-1])]
        self._pending: list[list[pa.Array]] = [[] for _ in self._fields]
        self._pending_bytes = [0] * len(self._fields)
        self._field_rows = [0] * len(self._fields)  # rows already written as pages, per field
        self.num_rows = 0
        self._closed = False
        # pages being encoded on the pool, written to the file in submission order
        self._inflight: deque[tuple[int, int, int, Future]] = deque()
        self._inflight_bytes = 0
        self._inflight_limit: int | None = None  # pages queued at most: 2 * encode_threads() + 2
        #: (position, size) of global buffers 1.. (:meth:`add_global_buffer`)
        self._extra_buffers: list[tuple[int, int]] = []

    @property
    def num_columns(self) -> int:
        return self._first_col[-1]

    @property
    def bytes_written(self) -> int:
        """Bytes on disk so far plus the Arrow bytes still buffered or being encoded (an
        estimate of the size)."""
        return self._pos + sum(self._pending_bytes) + self._inflight_bytes

    @property
    def bytes_flushed(self) -> int:
        """Bytes of the pages cut so far (on disk, or being encoded), without the Arrow bytes
        still buffered for the next page: pylance's ``tell()``, which stays 0 until a field
        has gathered a page (:data:`PAGE_BYTES`)."""
        return self._pos + self._inflight_bytes

    # -- writing -----------------------------------------------------------------------------

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append the rows of ``batch`` (whose columns are the schema's top-level fields)."""
        if batch.num_columns != len(self._fields):
            raise ValueError(f"batch has {batch.num_columns} columns, the schema {len(self._fields)}")
        n = batch.num_rows
        if n == 0:
            return
        for i in range(len(self._fields)):
            col = self._host_column(batch.column(i)) if self._blob[i] else batch.column(i)
            chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
            for chunk in chunks:
                for piece, nbytes in self._pieces(chunk, i):
                    self._pending[i].append(piece)
                    self._pending_bytes[i] += nbytes
                    if self._pending_bytes[i] >= self.page_bytes:
                        self._flush_field(i)
        self.num_rows += n

    # -- hooks of a writer that also takes device columns (lance_gpu.write.file_writer) --------

    def _host_column(self, col):
        """``col`` as an Arrow column (a blob field's bytes are written from the host)."""
        return col

    def _nbytes(self, piece) -> int:
        """Bytes of a buffered piece of a column."""
        return int(piece.nbytes)

    def _slice(self, chunk, offset: int, length: int):
        """Rows ``offset .. offset + length`` of a column chunk."""
        return chunk.slice(offset, length)

    def _encode_now(self, arrays: list, nbytes: int) -> bool:
        """Encode these buffered pieces in the writing thread rather than on the pool: a small
        page encodes faster than a hand-off to a pool thread and back (under load each
        hand-off waits for the scheduler), e.g. the few rows of a small append."""
        return nbytes < INLINE_ENCODE_BELOW

    def _encode(self, arrays: list, field: LanceField, minor: int) -> list[tuple[int, EncodedPage, int]]:
        """Encode the buffered pieces of one top-level field (see :func:`encode_field_rows`)."""
        return encode_field_rows(arrays, field, minor)

    def _pieces(self, chunk: pa.Array, i: int) -> list[tuple[pa.Array, int]]:
        """``chunk`` cut so that no page gets much more than :attr:`page_bytes` of it: a big
        chunk becomes several pages that encode in parallel on the pool instead of one
        page that keeps a single encoder busy while the others idle (blob fields, whose
        bytes are written as they are flushed, are not cut); each piece with its bytes."""
        n = len(chunk)
        nbytes = self._nbytes(chunk)
        if not n or self._blob[i] or self._pending_bytes[i] + nbytes <= self.page_bytes:
            return [(chunk, nbytes)] if n else []
        per_row = nbytes / n
        first = max(1, int((self.page_bytes - self._pending_bytes[i]) / per_row))
        rows = max(1, int(self.page_bytes / per_row))
        cuts = [0, *range(first, n, rows)]
        if n - cuts[-1] < rows // 4 and len(cuts) > 1:
            cuts.pop()  # no sliver of a page at the end: the last piece runs a little over
        cuts.append(n)
        pieces = [self._slice(chunk, a, b - a) for a, b in itertools.pairwise(cuts) if b > a]
        return [(piece, self._nbytes(piece)) for piece in pieces]

    def _flush_field(self, i: int) -> None:
        arrays = self._pending[i]
        if not arrays:
            return
        self._pending[i] = []
        nbytes = self._pending_bytes[i]
        first_row = self._field_rows[i]
        self._pending_bytes[i] = 0
        self._field_rows[i] += len(arrays[0]) if len(arrays) == 1 else sum(len(a) for a in arrays)
        if self._blob[i]:
            # blob bytes go into the file now (the descriptors hold their offsets)
            arr = arrays[0] if len(arrays) == 1 else _concat(arrays)
            page = encode_blob_page(arr, self._fields[i], self.minor, self._write_blob_bytes)
            fut: Future = Future()
            fut.set_result([(0, page, 0)])
        elif self._encode_now(arrays, nbytes):
            fut = done_now(self._encode, arrays, self._fields[i], self.minor)
        else:
            fut = _pool().submit(self._encode, arrays, self._fields[i], self.minor)
        self._inflight.append((i, first_row, nbytes, fut))
        self._inflight_bytes += nbytes
        if len(self._inflight) > 4:  # (the limit is looked up only for files of many pages)
            if self._inflight_limit is None:
                self._inflight_limit = 2 * encode_threads() + 2
            while len(self._inflight) > self._inflight_limit:
                self._write_next()

    @property
    def encoding(self) -> bool:
        """Are pages of this file queued for encoding?"""
        return bool(self._inflight)

    def flush(self) -> None:
        """Queue every buffered field for encoding (a page each), the biggest first so the
        encoders finish together."""
        for i in sorted(range(len(self._fields)), key=lambda i: -self._pending_bytes[i]):
            self._flush_field(i)

    def _write_next(self) -> None:
        i, first_row, nbytes, fut = self._inflight.popleft()
        self._inflight_bytes -= nbytes
        for k, page, offset in fut.result():
            self._write_page(self._first_col[i] + k, page, first_row + offset)

    def _drain(self) -> None:
        while self._inflight:
            self._write_next()

    def _write_buffer(self, data: bytes | np.ndarray | PendingBuffer) -> tuple[int, int]:
        """Write ``data`` at the next multiple of :data:`ALIGNMENT` (zeros before it); returns
        its position and size.  Small pieces are gathered (:meth:`_put`)."""
        pad = (-self._pos) % ALIGNMENT
        if not isinstance(data, (bytes, np.ndarray)) and isinstance(data, PendingBuffer):
            # (host buffers are checked first: a runtime Protocol check costs ~20 us)
            data = data.result()  # a device page buffer: wait for its copy to the host
        view = np.ascontiguousarray(data).data if isinstance(data, np.ndarray) else memoryview(data)
        n = view.nbytes
        pos = self._pos + pad
        if self._gathered_bytes + pad + n < GATHER_BYTES:  # (what _put does, inline: most pieces)
            if pad:
                self._gathered.append(_ZEROS[:pad])
            self._gathered.append(view)
            self._gathered_bytes += pad + n
            self._pos = pos + n
        else:
            if pad:
                self._put(_ZEROS[:pad])
            self._put(view)
        return pos, n

    def _put(self, piece: bytes | memoryview) -> None:
        """Append ``piece`` to the file: pieces under :data:`GATHER_BYTES` are gathered and
        written together once that many are held (or at :meth:`finish`): a small file is one
        write to its handle, not one per buffer, pad and table."""
        n = len(piece) if isinstance(piece, bytes) else piece.nbytes
        self._pos += n
        if n >= GATHER_BYTES:
            self._spill()
            self._fh.write(piece)
            return
        self._gathered.append(piece)
        self._gathered_bytes += n
        if self._gathered_bytes >= GATHER_BYTES:
            self._spill()

    def _spill(self) -> None:
        """Write the gathered pieces (see :meth:`_put`)."""
        parts = self._gathered
        if parts:
            self._gathered = []
            self._gathered_bytes = 0
            self._fh.write(parts[0] if len(parts) == 1 else b"".join(parts))

    def add_global_buffer(self, data: bytes) -> int:
        """Write ``data`` now (64-byte aligned, between pages) as the next global buffer and
        return its index (1, 2, ...; 0 is the ``FileDescriptor`` written by :meth:`finish`).
        Index files name these buffers in their schema metadata."""
        self._drain()
        self._extra_buffers.append(self._write_buffer(bytes(data)))
        return len(self._extra_buffers)

    def _write_blob_bytes(self, data: np.ndarray) -> int:
        return self._write_buffer(data)[0]

    def _write_page(self, column: int, page: EncodedPage, first_row: int) -> None:
        offsets, sizes = [], []
        for buf in page.buffers:
            pos, size = self._write_buffer(buf)
            offsets.append(pos)
            sizes.append(size)
        self._columns[column].append(
            file2_pb2.ColumnMetadata.Page(
                buffer_offsets=offsets,
                buffer_sizes=sizes,
                length=page.num_rows,
                encoding=_any(PAGE_LAYOUT_URL if self.minor else ARRAY_ENCODING_URL, page.layout),
                priority=first_row,
            )
        )

    # -- finishing ---------------------------------------------------------------------------

    def finish(self, sync: bool = True) -> int:
        """Encode what is buffered, write the metadata and footer, close; returns the size.

        ``sync=False`` leaves the fsync and close to :meth:`sync_close` (the caller may run
        it in the background)."""
        for i in range(len(self._fields)):
            self._flush_field(i)
        self._drain()
        # FileDescriptor{schema, length}: the schema's part kept with the schema
        descriptor = self.schema.file_schema_bytes() + file_pb2.FileDescriptor(length=self.num_rows).SerializeToString()
        gb_pos, gb_size = self._write_buffer(descriptor)
        blob_columns = {self._first_col[i] for i, blob in enumerate(self._blob) if blob and self.minor == 0}
        meta_start = self._pos
        # column metadata, its offset table, the global buffer table and the footer: one piece
        tail: list[bytes] = []
        table: list[int] = []
        at = meta_start
        for c, pages in enumerate(self._columns):
            raw = file2_pb2.ColumnMetadata(encoding=_column_encoding(c in blob_columns), pages=pages).SerializeToString()
            tail.append(raw)
            table += (at, len(raw))
            at += len(raw)
        cmo_start = at
        buffers = [(gb_pos, gb_size), *self._extra_buffers]
        gbo_start = cmo_start + 8 * len(table)
        for pos, size in buffers:
            table += (pos, size)
        tail.append(struct.pack(f"<{len(table)}Q", *table))
        major, minor = (2, self.minor) if self.minor else (0, 3)  # 2.0 files say 0.3
        tail.append(struct.pack("<QQQIIHH4s", meta_start, cmo_start, gbo_start, len(buffers), len(self._columns), major, minor, MAGIC))
        self._put(b"".join(tail))
        self._spill()
        if sync:
            self.sync_close()
        return self._pos

    def sync_close(self, sync: bool = True) -> None:
        """Publish the finished file (locally: fsync and rename the staging file, or with
        ``sync=False`` rename it unsynced -- the commit's :meth:`ObjectStore.sync` makes it
        durable before a manifest names it; on object stores: upload it)."""
        if not self._closed:
            self._closed = True
            self._fh.close(sync)

    def abort(self) -> None:
        """Drop the partial file (its staging file, or the object if already published)."""
        while self._inflight:
            self._inflight.popleft()[3].cancel()
        if not self._closed:
            self._closed = True
            self._fh.abort()
        else:
            self.store.delete(self.path)


def _concat(arrays: list[pa.Array]) -> pa.Array:
    if pa.types.is_dictionary(arrays[0].type):
        if any(a.dictionary.null_count for a in arrays):
            # Arrow cannot unify dictionaries holding nulls (2.0 files store a null key as a key to a null
            # item, and read back so): re-encode the values, nulls as null keys.
            t = arrays[0].type
            values = pa.concat_arrays([a.cast(t.value_type) for a in arrays]).dictionary_encode()
            return pa.DictionaryArray.from_arrays(values.indices.cast(t.index_type), values.dictionary)
        chunked = pa.chunked_array(arrays).unify_dictionaries()
        return pa.concat_arrays(chunked.chunks)
    return pa.concat_arrays(arrays)
