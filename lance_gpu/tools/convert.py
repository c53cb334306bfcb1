# SPDX-License-Identifier: Apache-2.0
"""Streaming conversion between Lance and Parquet, CSV, Arrow IPC or a pyarrow dataset.

Both directions hold one batch (``batch_size`` rows, plus the writer's open pages) in memory
at a time, so inputs larger than memory convert:

* to Lance: a pyarrow dataset scanner (Parquet, CSV, a directory of either, Arrow IPC files)
  or an Arrow IPC stream reader feeds :func:`lance_gpu.write_dataset` as a stream;
* Lance to Parquet: :meth:`LanceDataset.to_batches` feeds a ``pyarrow.parquet.ParquetWriter``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from lance_gpu.errors import LanceGpuError
from lance_gpu.progress import ProgressHook, count_rows
from lance_gpu.tools._open import StorageOptions, is_lance_dataset, open_dataset, write

INPUT_FORMATS = ("parquet", "csv", "ipc")
_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".arrow": "ipc", ".ipc": "ipc", ".feather": "ipc", ".arrows": "ipc"}


class ConvertError(LanceGpuError, ValueError):
    """The source or destination of a conversion cannot be used (unknown format, no files)."""


@dataclass(frozen=True, slots=True)
class ConvertResult:
    """What :func:`convert` wrote: ``rows`` rows from ``source`` (``source_format``) to ``dest``
    (``dest_format``: ``"lance"`` or ``"parquet"``); ``version`` is the Lance version written."""

    source: str
    source_format: str
    dest: str
    dest_format: str
    rows: int
    version: int | None = None


def _fs(path: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's file system for a Parquet / CSV / IPC path or URI (a bare path is local)."""
    if "://" in path:
        fs, key = pafs.FileSystem.from_uri(path)
        return fs, key
    return pafs.LocalFileSystem(), path


def output_stream(path: str) -> pa.NativeFile:
    """A binary output stream for an output file (a path or a pyarrow file system URI)."""
    fs, key = _fs(path)
    return fs.open_output_stream(key)


def file_suffix(name: str) -> str:
    """``.parquet`` of ``dir/x.PARQUET``; empty when the name has none."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    return "." + base.rsplit(".", 1)[1].lower() if "." in base else ""


def _guess_format(fs: pafs.FileSystem, path: str, is_dir: bool) -> str:
    if is_dir:
        found = sorted({_SUFFIXES[x] for x in (file_suffix(i.path) for i in fs.get_file_info(pafs.FileSelector(path, recursive=True))) if x in _SUFFIXES})
        if len(found) == 1:
            return found[0]
        what = "no Parquet, CSV or Arrow IPC files" if not found else f"files of several formats ({', '.join(found)})"
        raise ConvertError(f"{path}: directory holds {what}; pass source_format= / --format")
    if file_suffix(path) not in _SUFFIXES:
        raise ConvertError(f"{path}: cannot tell the format from the name; pass source_format= / --format ({', '.join(INPUT_FORMATS)})")
    return _SUFFIXES[file_suffix(path)]


def _ipc_stream(fs: pafs.FileSystem, path: str, batch_size: int) -> tuple[pa.Schema, Iterator[pa.RecordBatch], int | None]:
    """An Arrow IPC file (random access) or stream, batch by batch."""
    try:
        reader = pa.ipc.open_file(fs.open_input_file(path))
    except pa.ArrowInvalid:
        stream = pa.ipc.open_stream(fs.open_input_stream(path))
        rechunked = (b for big in stream for b in pa.Table.from_batches([big]).to_batches(max_chunksize=batch_size))
        return stream.schema, rechunked, None
    total = sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(reader.num_record_batches):
            yield from pa.Table.from_batches([reader.get_batch(i)]).to_batches(max_chunksize=batch_size)

    return reader.schema, batches(), total


def open_source(source: str, source_format: str | None, batch_size: int) -> tuple[str, pa.Schema, Iterator[pa.RecordBatch], int | None]:
    """``(format, schema, batches, total rows or None)`` of a non-Lance source, streamed."""
    import pyarrow.dataset as pads

    fs, path = _fs(source)
    kind = fs.get_file_info(path).type
    if kind == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{source}: no such file or directory")
    is_dir = kind == pafs.FileType.Directory
    fmt = source_format or _guess_format(fs, path, is_dir)
    if fmt not in INPUT_FORMATS:
        raise ConvertError(f"source_format must be one of {INPUT_FORMATS}, not {fmt!r}")
    if fmt == "ipc" and not is_dir:
        schema, batches, total = _ipc_stream(fs, path, batch_size)
        return fmt, schema, batches, total
    file_format: object = fmt
    if fmt == "csv":
        import pyarrow.csv as pcsv

        # an unquoted empty field is null, a quoted one ("") the empty string: what pyarrow's
        # (and our ``scan --format csv``) writer produces for null and ""
        file_format = pads.CsvFileFormat(convert_options=pcsv.ConvertOptions(strings_can_be_null=True, quoted_strings_can_be_null=False))
    elif fmt == "parquet":
        # pre-buffering reads whole column chunks ahead (80 MB for a 90 MB file): off, so
        # memory stays a few batches
        scan_options = pads.ParquetFragmentScanOptions(pre_buffer=False)
        file_format = pads.ParquetFileFormat(default_fragment_scan_options=scan_options)
    try:
        data = pads.dataset(path, format=file_format, filesystem=fs)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ConvertError(f"{source}: not readable as {fmt}: {exc}") from exc
    total = data.count_rows() if fmt in ("parquet", "ipc") else None
    # little readahead: memory stays a few batches, whatever the size of the input
    return fmt, data.schema, data.to_batches(batch_size=batch_size, batch_readahead=2, fragment_readahead=1), total


def convert(
    source: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    source_format: str | None = None,
    mode: str = "create",
    version: int | str | None = None,
    columns: Sequence[str] | None = None,
    filter: str | None = None,  # noqa: A002 - pylance's name
    batch_size: int = 65_536,
    data_storage_version: str | None = None,
    max_rows_per_file: int | None = None,
    progress: ProgressHook | None = None,
    storage_options: StorageOptions | None = None,
) -> ConvertResult:
    """Convert ``source`` to ``dest``, streaming.

    Parameters
    ----------
    source : str or path
        A Lance dataset (converted to the Parquet file ``dest``), or a Parquet, CSV or Arrow
        IPC file, or a directory of them (a pyarrow dataset), converted to the Lance dataset
        ``dest``.
    dest : str or path
        The Parquet file or Lance dataset to write.
    source_format : {"parquet", "csv", "ipc"}, optional
        Format of a non-Lance source; default: from the file suffixes.
    mode : {"create", "append", "overwrite"}
        As :func:`lance_gpu.write_dataset` (to Lance).  To Parquet, ``"create"`` refuses an
        existing ``dest``.
    version, columns, filter :
        Which version, columns and rows of a Lance source to write (pylance's meanings).
    batch_size : int
        Rows per batch held in memory.
    data_storage_version, max_rows_per_file :
        Passed to :func:`lance_gpu.write_dataset`.
    progress : ProgressHook, optional
        Told ``("rows converted", done, total)``; ``total`` is None for CSV and IPC streams.
    storage_options : dict, optional
        Object store options of the Lance side, passed to ``dataset()`` / ``write_dataset()``.
    """
    source, dest = os.fspath(source), os.fspath(dest)
    if batch_size < 1:
        raise ValueError("batch_size must be positive")
    if is_lance_dataset(source, storage_options):
        return _lance_to_parquet(source, dest, mode, version, columns, filter, batch_size, progress, storage_options)
    if version is not None or columns is not None or filter is not None:
        raise ConvertError("version, columns and filter apply to a Lance source only")
    fmt, schema, batches, total = open_source(source, source_format, batch_size)
    counted = count_rows(batches, progress, "rows converted", total)
    kwargs: dict[str, object] = {"mode": mode}
    if data_storage_version is not None:
        kwargs["data_storage_version"] = data_storage_version
    if max_rows_per_file is not None:
        kwargs["max_rows_per_file"] = max_rows_per_file
    ds = write(pa.RecordBatchReader.from_batches(schema, counted), dest, storage_options, **kwargs)
    return ConvertResult(source, fmt, ds.uri, "lance", ds.count_rows(), ds.version)


def _lance_to_parquet(
    source: str,
    dest: str,
    mode: str,
    version: int | str | None,
    columns: Sequence[str] | None,
    filter: str | None,  # noqa: A002
    batch_size: int,
    progress: ProgressHook | None,
    storage_options: StorageOptions | None,
) -> ConvertResult:
    import pyarrow.parquet as pq

    if file_suffix(dest) not in (".parquet", ".pq"):
        raise ConvertError(f"{dest}: a Lance dataset converts to Parquet only; name the destination *.parquet")
    if mode not in ("create", "overwrite"):
        raise ConvertError(f"mode must be 'create' or 'overwrite' when writing Parquet, not {mode!r}")
    fs, path = _fs(dest)
    if mode == "create" and fs.get_file_info(path).type != pafs.FileType.NotFound:
        raise FileExistsError(f"{dest} already exists (use mode='overwrite')")
    ds = open_dataset(source, version, storage_options)
    total = ds.count_rows() if filter is None else None  # a filtered count would read everything twice
    batches = count_rows(ds.to_batches(columns, filter, batch_size=batch_size), progress, "rows converted", total)
    first = next(batches, None)
    if first is not None:
        schema = first.schema
    elif columns is None:
        schema = ds.schema
    else:
        schema = pa.schema([ds.schema.field(c) for c in columns])
    tmp = f"{path}.partial"
    rows = 0
    try:
        with pq.ParquetWriter(tmp, schema, filesystem=fs) as writer:
            for batch in itertools.chain([first] if first is not None else [], batches):
                writer.write_batch(batch)
                rows += batch.num_rows
        fs.move(tmp, path)
    except BaseException:
        if fs.get_file_info(tmp).type != pafs.FileType.NotFound:
            fs.delete_file(tmp)
        raise
    return ConvertResult(source, "lance", dest, "parquet", rows, ds.version)
