# SPDX-License-Identifier: Apache-2.0
"""pylance's single-file API (``lance.file``): read and write one ``.lance`` file, outside
any dataset.

:class:`LanceFileWriter` streams batches into one file of version 2.0, 2.1 or 2.2 (the
data files datasets use; ``version=None`` writes 2.2, pylance's stable version), its schema
and schema metadata in the file descriptor (global buffer 0); the file appears only when
:meth:`LanceFileWriter.close` finishes it (a writer dropped unclosed leaves nothing).

:class:`LanceFileReader` reads any such file -- written by pylance or by lance-gpu -- whole,
by row range or by row indices (:class:`ReaderResults`), and describes it
(:meth:`LanceFileReader.metadata`: schema, rows, byte counts, the footer's version -- 0.3
for 2.0 files, as pylance reports it -- and each column's pages and buffers).

Differences from pylance 14.0.2: ``data_cache_bytes`` is accepted and ignored, and
``max_page_bytes`` applies to 2.0 files only (as pylance), page sizes otherwise being
lance-gpu's own; legacy (0.1) files are refused.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lance_gpu.errors import InvalidArgumentError, ObjectNotFoundError, UnsupportedFeatureError
from lance_gpu.file.container import FileVersion
from lance_gpu.file.container import LanceFileReader as _ContainerReader
from lance_gpu.file.reader import read_field, take_field
from lance_gpu.file.v2_0 import read_field as read_v20
from lance_gpu.file.writer.blobs import column_field_ids
from lance_gpu.file.writer.container import HostFileWriter as _FileWriter
from lance_gpu.file.writer.container import check_writable_types
from lance_gpu.io import join, resolve
from lance_gpu.table.schema import LanceSchema

__all__ = [
    "LanceBufferDescriptor",
    "LanceColumnMetadata",
    "LanceColumnStatistics",
    "LanceFileMetadata",
    "LanceFileReader",
    "LanceFileSession",
    "LanceFileStatistics",
    "LanceFileWriter",
    "LancePageMetadata",
    "ReaderResults",
]

_MINORS = {"2.0": 0, "0.3": 0, "2.1": 1, "2.2": 2, "stable": 2, "next": 2}


def _minor(version: str | None) -> int:
    if version is None:
        return 2
    key = str(version).strip().lower()
    if key in ("legacy", "0.1"):
        raise UnsupportedFeatureError("LanceFileWriter: legacy (0.1) files cannot be written by lance-gpu")
    if key not in _MINORS:
        raise InvalidArgumentError(f"LanceFileWriter: unknown file version {version!r} (expected 2.0, 2.1 or 2.2)")
    return _MINORS[key]


class LanceFileWriter:
    """Write one Lance file (pylance's ``lance.file.LanceFileWriter``).

    Parameters
    ----------
    path : str or Path
        Where to write (a path, or a URI ``storage_options`` opens).
    schema : pyarrow.Schema, optional
        The data's schema; inferred from the first batch when omitted.
    data_cache_bytes : int, optional
        Accepted for compatibility (lance-gpu sizes its own buffers).
    version : str, optional
        ``"2.0"``, ``"2.1"`` or ``"2.2"`` (``None``: 2.2).
    storage_options : dict, optional
        Object store options.
    max_page_bytes : int, optional
        The most bytes of a column per page in 2.0 files (pylance's rule: 2.1 and later
        files ignore it; lance-gpu chooses their page sizes).
    **kwargs
        Other pylance options, ignored.

    Attributes
    ----------
    size_bytes : int or None
        The file's size once :meth:`close` has written it.
    """

    def __init__(self, path: str | os.PathLike[str], schema: pa.Schema | None = None, *,
                 data_cache_bytes: int | None = None, version: str | None = None,
                 storage_options: dict[str, str] | None = None, max_page_bytes: int | None = None,
                 **kwargs: Any) -> None:
        self._minor = _minor(version)
        # pylance splits pages at max_page_bytes on write in 2.0 files only (2.1+ split on read)
        self._page_bytes = int(max_page_bytes) if max_page_bytes is not None and self._minor == 0 else None
        self._store, self._key = resolve(os.fspath(path), storage_options)
        self._writer: _FileWriter | None = None
        self._metadata: dict[str, bytes] = {}
        self.closed = False
        self.size_bytes: int | None = None
        # one batch, buffer or close at a time: threads sharing a writer (pylance's is
        # thread-safe) must not interleave one batch's columns with another's
        self._lock = threading.RLock()
        if schema is not None:
            self._open(schema)

    def _open(self, schema: pa.Schema) -> _FileWriter:

        lance_schema = LanceSchema.from_arrow(schema)
        check_writable_types(lance_schema, self._minor)
        self._arrow = lance_schema.to_arrow(physical=True)
        self._writer = _FileWriter(self._key, lance_schema, self._minor, page_bytes=self._page_bytes, store=self._store)
        return self._writer

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append the rows of ``batch``.

        Parameters
        ----------
        batch : pyarrow.RecordBatch or pyarrow.Table
            Rows with the writer's schema (the first batch fixes it when none was given).
        """
        with self._lock:
            if self.closed:
                raise InvalidArgumentError("LanceFileWriter: the file is closed")
            writer = self._writer if self._writer is not None else self._open(batch.schema)
            if batch.schema.names != self._arrow.names:
                raise InvalidArgumentError(
                    f"LanceFileWriter: batch columns {batch.schema.names} do not match the file's {self._arrow.names}")
            if not batch.schema.equals(self._arrow):
                batch = batch.cast(self._arrow)
            writer.write(batch)

    def add_schema_metadata(self, key: str, value: str) -> None:
        """Add a schema metadata entry (before :meth:`close`).

        Parameters
        ----------
        key, value : str
            The entry.
        """
        self._metadata[str(key)] = str(value).encode()

    def add_global_buffer(self, data: bytes) -> int:
        """Write ``data`` as the next global buffer of the file (64-byte aligned, between the
        pages) and return its index: 1, 2, ... (0 is the file descriptor); read it back with
        :meth:`LanceFileReader.read_global_buffer`.

        Parameters
        ----------
        data : bytes
            The buffer's bytes.
        """
        with self._lock:
            if self.closed:
                raise InvalidArgumentError("LanceFileWriter: the file is closed")
            if self._writer is None:
                raise InvalidArgumentError("LanceFileWriter: a global buffer needs the schema first (pass schema= or "
                                           "write a batch)")
            return self._writer.add_global_buffer(bytes(data))

    def close(self) -> int | None:
        """Finish the file: write the metadata and footer; returns the rows written (None
        when already closed)."""
        with self._lock:
            if self.closed:
                return None
            self.closed = True
            if self._writer is None:
                raise InvalidArgumentError("Schema is unknown and file cannot be created")
            self._writer.schema.metadata.update(self._metadata)
            self.size_bytes = self._writer.finish()
            return int(self._writer.num_rows)

    def _abort(self) -> None:
        if not self.closed and self._writer is not None:
            self.closed = True
            self._writer.abort()

    def __enter__(self) -> LanceFileWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self._abort()
            return
        self.close()

    def __del__(self) -> None:
        try:
            self._abort()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass


class ReaderResults:
    """Batches read from a file (pylance's ``ReaderResults``)."""

    def __init__(self, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> None:
        self._schema = schema
        self._batches = batches

    def to_batches(self) -> pa.RecordBatchReader:
        """The batches, as a reader."""
        return pa.RecordBatchReader.from_batches(self._schema, self._batches)

    def to_table(self) -> pa.Table:
        """All rows as one table."""
        return pa.Table.from_batches(list(self._batches), schema=self._schema)


@dataclass
class LanceBufferDescriptor:
    """Where a buffer lies in the file."""

    position: int
    size: int


@dataclass
class LancePageMetadata:
    """One page: its buffers and encoding (the serialized protobuf ``Any``)."""

    buffers: list[LanceBufferDescriptor]
    encoding: str


@dataclass
class LanceColumnMetadata:
    """One column: its column-level buffers and pages."""

    column_buffers: list[LanceBufferDescriptor]
    pages: list[LancePageMetadata]


@dataclass
class LanceFileMetadata:
    """What a file's metadata says (pylance's ``LanceFileMetadata``)."""

    schema: pa.Schema
    num_rows: int
    num_data_bytes: int
    num_column_metadata_bytes: int
    num_global_buffer_bytes: int
    major_version: int
    minor_version: int
    global_buffers: list[LanceBufferDescriptor] = field(default_factory=list)
    columns: list[LanceColumnMetadata] = field(default_factory=list)


@dataclass
class LanceColumnStatistics:
    """A column's page count and bytes."""

    num_pages: int
    size_bytes: int


@dataclass
class LanceFileStatistics:
    """Per-column statistics of a file."""

    columns: list[LanceColumnStatistics]


class LanceFileReader:
    """Read one Lance file (pylance's ``lance.file.LanceFileReader``).

    Parameters
    ----------
    path : str or Path
        The file (a path, or a URI ``storage_options`` opens).
    storage_options : dict, optional
        Object store options.
    columns : list of str, optional
        Top-level columns to read (default: all).
    """

    def __init__(self, path: str | os.PathLike[str], storage_options: dict[str, str] | None = None,
                 columns: Sequence[str] | None = None, **kwargs: Any) -> None:
        store, key = resolve(os.fspath(path), storage_options)
        self._file = _ContainerReader(key, store)
        desc = self._file.descriptor
        self._schema = LanceSchema.from_protos(desc.schema.fields, dict(desc.schema.metadata), self._file.path)
        self._arrow = self._schema.to_arrow()
        minor = self._file.version.minor
        column_ids = column_field_ids(self._schema, minor)
        column_of = {fid: k for k, fid in enumerate(column_ids)}
        names = list(self._arrow.names) if columns is None else list(columns)
        unknown = [n for n in names if n not in self._arrow.names]
        if unknown:
            raise InvalidArgumentError(f"LanceFileReader: no column named {unknown[0]!r} in {self._file.path}")
        self._fields = []
        for name in names:
            top = next(f for f in self._schema.fields if f.name == name)
            ids = [f.id for f in top.walk()] if minor == 0 else [i for i in column_ids if i in {f.id for f in top.walk()}]
            self._fields.append((self._arrow.field(name), [column_of[i] for i in ids]))
        self._out_schema = pa.schema([f for f, _ in self._fields], metadata=self._arrow.metadata)

    def num_rows(self) -> int:
        """Rows in the file."""
        return int(self._file.num_rows)

    def _read(self, rows: np.ndarray | None, row_range: tuple[int, int] | None) -> pa.Table:
        arrays = []
        for arrow_field, cols in self._fields:
            if self._file.version == FileVersion(2, 0):
                if rows is not None:
                    lo, hi = (int(rows.min()), int(rows.max()) + 1) if rows.size else (0, 0)
                    arr = read_v20(self._file, arrow_field, cols, (lo, hi))
                    arr = arr.take(pa.array(rows - lo)) if rows.size else arr
                else:
                    arr = read_v20(self._file, arrow_field, cols, row_range)
            elif rows is not None:
                order = np.argsort(rows, kind="stable")
                uniq, inverse = np.unique(rows[order], return_inverse=True)
                arr = take_field(self._file, arrow_field, cols, uniq) if uniq.size else pa.array([], arrow_field.type)
                if isinstance(arr, pa.ChunkedArray):
                    arr = arr.combine_chunks()
                back = np.empty(rows.size, np.int64)
                back[order] = inverse
                arr = arr.take(pa.array(back))
            else:
                arr = read_field(self._file, arrow_field, cols, row_range)
            arrays.append(arr)
        return pa.Table.from_arrays(arrays, schema=self._out_schema)

    def _results(self, table: pa.Table, batch_size: int) -> ReaderResults:
        return ReaderResults(self._out_schema, iter(table.to_batches(max_chunksize=max(1, int(batch_size)))))

    def read_all(self, *, batch_size: int = 1024, batch_readahead: int = 16) -> ReaderResults:
        """Every row.

        Parameters
        ----------
        batch_size : int, default 1024
            Rows per batch.
        batch_readahead : int, default 16
            Accepted for compatibility.
        """
        return self._results(self._read(None, None), batch_size)

    def read_range(self, start: int, num_rows: int, *, batch_size: int = 1024, batch_readahead: int = 16) -> ReaderResults:
        """Rows ``start`` to ``start + num_rows``.

        Parameters
        ----------
        start, num_rows : int
            The range.
        batch_size : int, default 1024
            Rows per batch.
        batch_readahead : int, default 16
            Accepted for compatibility.
        """
        if start < 0 or num_rows < 0 or start + num_rows > self.num_rows():
            raise InvalidArgumentError(f"read_range: rows {start}..{start + num_rows} are outside the file's {self.num_rows()} rows")
        return self._results(self._read(None, (int(start), int(start) + int(num_rows))), batch_size)

    def take_rows(self, indices: Sequence[int], *, batch_size: int = 1024, batch_readahead: int = 16) -> ReaderResults:
        """The rows at ``indices`` (strictly ascending, as pylance requires).

        Parameters
        ----------
        indices : sequence of int
            Row numbers in the file, strictly ascending (else ``ValueError``, as pylance).
        batch_size : int, default 1024
            Rows per batch.
        batch_readahead : int, default 16
            Accepted for compatibility.
        """
        rows = np.asarray(list(indices), dtype=np.int64)
        descending = np.flatnonzero(rows[:-1] > rows[1:])
        if descending.size:
            k = int(descending[0])
            raise InvalidArgumentError(f"Indices must be sorted in ascending order for file API, got {rows[k]} > {rows[k + 1]}")
        repeated = np.flatnonzero(rows[:-1] == rows[1:])
        if repeated.size:
            k = int(repeated[0])
            raise InvalidArgumentError(
                f"Requested row indices are not strictly increasing at index {k}: {rows[k]} then {rows[k + 1]}")
        if rows.size and (rows.min() < 0 or rows.max() >= self.num_rows()):
            raise InvalidArgumentError(f"take_rows: index {int(rows.max())} is out of range for {self.num_rows()} rows")
        return self._results(self._read(rows, None), batch_size)

    def read_global_buffer(self, index: int) -> bytes:
        """The bytes of global buffer ``index`` (0: the file descriptor).

        Parameters
        ----------
        index : int
            The buffer's position in the global buffer table.
        """
        meta = self._file.meta
        if not 0 <= index < meta.num_global_buffers:
            raise InvalidArgumentError(f"global buffer {index} does not exist (the file has {meta.num_global_buffers})")
        off, size = (int(x) for x in meta._gbo[index])
        return self._file.read_buffers([(off, size)])[0].tobytes()

    def metadata(self) -> LanceFileMetadata:
        """The file's metadata: schema, rows, byte counts, version and columns."""
        meta = self._file.meta
        columns = []
        for c in range(meta.num_columns):
            info = self._file.column(c)
            pages = [LancePageMetadata([LanceBufferDescriptor(int(o), int(s)) for o, s in zip(p.buffer_offsets, p.buffer_sizes, strict=True)],
                                       p.encoding.SerializeToString().hex() if p.encoding is not None else "")
                     for p in info.pages]
            columns.append(LanceColumnMetadata(
                [LanceBufferDescriptor(int(o), int(s)) for o, s in zip(info.buffer_offsets, info.buffer_sizes, strict=True)], pages))
        gbs = [LanceBufferDescriptor(int(o), int(s)) for o, s in meta._gbo]
        major, minor = (0, 3) if self._file.version == FileVersion(2, 0) else (2, self._file.version.minor)
        return LanceFileMetadata(
            schema=self._arrow,
            num_rows=self.num_rows(),
            num_data_bytes=int(meta._meta_start),
            num_column_metadata_bytes=len(meta._meta),
            num_global_buffer_bytes=sum(b.size for b in gbs),
            major_version=major,
            minor_version=minor,
            global_buffers=gbs,
            columns=columns,
        )

    def file_statistics(self) -> LanceFileStatistics:
        """Per column: pages and the bytes of its pages' buffers."""
        stats = []
        for col in self.metadata().columns:
            size = sum(b.size for p in col.pages for b in p.buffers) + sum(b.size for b in col.column_buffers)
            stats.append(LanceColumnStatistics(len(col.pages), size))
        return LanceFileStatistics(stats)


class LanceFileSession:
    """Readers, writers and object operations under one base path, sharing one object
    store (pylance's ``lance.file.LanceFileSession``).

    Parameters
    ----------
    base_path : str or Path
        A directory or URI; every ``path`` below is relative to it.
    storage_options : dict, optional
        Object store options.
    **kwargs
        pylance's namespace options (``namespace_client``, ``table_id``), ignored.
    """

    def __init__(self, base_path: str | os.PathLike[str], storage_options: dict[str, str] | None = None,
                 **kwargs: Any) -> None:
        self._base = os.fspath(base_path).rstrip("/")
        self._options = storage_options
        self._store, self._root = resolve(self._base, storage_options)

    def _uri(self, path: str) -> str:
        return f"{self._base}/{path.lstrip('/')}"

    def _key(self, path: str | None) -> str:
        return self._root if not path else join(self._root, path.strip("/"))

    def open_reader(self, path: str, columns: Sequence[str] | None = None) -> LanceFileReader:
        """A reader of the file at ``path`` (optionally of some top-level ``columns``)."""
        return LanceFileReader(self._uri(path), self._options, columns=columns)

    def open_writer(self, path: str, *, schema: pa.Schema | None = None, data_cache_bytes: int | None = None,
                    version: str | None = None, keep_original_array: bool | None = None,
                    max_page_bytes: int | None = None) -> LanceFileWriter:
        """A writer of a new file at ``path`` (arguments as :class:`LanceFileWriter`'s)."""
        return LanceFileWriter(self._uri(path), schema, data_cache_bytes=data_cache_bytes, version=version,
                               storage_options=self._options, max_page_bytes=max_page_bytes)

    def contains(self, path: str) -> bool:
        """Whether a file exists at ``path``."""
        return self._store.exists(self._key(path))

    def list(self, path: str | None = None) -> list[str]:
        """Every file under ``path`` (default: the base path), recursively, relative to the base path."""
        prefix = self._root.rstrip("/") + "/" if self._root else ""
        keys = [m.path for m in self._store.list(self._key(path))]
        return sorted(k[len(prefix):] if k.startswith(prefix) else k for k in keys)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """``length`` bytes of the file at ``path`` from ``offset`` (a missing file: ``OSError``)."""
        return bytes(self._store.read_range(self._key(path), int(offset), int(length)))

    def delete_file(self, path: str) -> None:
        """Delete the file at ``path`` (a missing file: ``OSError``, as pylance's)."""
        key = self._key(path)
        if not self._store.exists(key):
            raise ObjectNotFoundError(self._store.uri(key), "delete: no such file")
        self._store.delete(key)

    def upload_file(self, local_path: str | os.PathLike[str], remote_path: str) -> None:
        """Copy a local file to ``remote_path``."""
        local, key = resolve(local_path)  # the local file system's store
        self._store.put(self._key(remote_path), local.get(key))

    def download_file(self, remote_path: str, local_path: str | os.PathLike[str]) -> None:
        """Copy the file at ``remote_path`` to a local file."""
        local, key = resolve(local_path)
        local.put(key, self._store.get(self._key(remote_path)))
