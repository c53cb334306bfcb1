# SPDX-License-Identifier: Apache-2.0
"""``write_dataset``: Arrow data to Lance data files and a committed version.

Data is streamed batch by batch into data files of at most ``max_rows_per_file`` rows (a
file is also closed at the first batch boundary after it reaches ``max_bytes_per_file``);
each file is one fragment.  Memory holds at most one page per field being encoded plus
the batch in hand.  Nothing is visible to readers until the commit
(:mod:`lance_gpu.write.commit`) publishes the new manifest; a failed write deletes the data
files it wrote.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait

import pyarrow as pa

from lance_gpu._proto import table_pb2
from lance_gpu.errors import DatasetExistsError, LanceGpuError, SchemaMismatchError, UnsupportedFeatureError
from lance_gpu.progress import ProgressHook, count_rows
from lance_gpu.table.features import check_writer_flags
from lance_gpu.io import ObjectStore, join, resolve
from lance_gpu.table.schema import LanceSchema
from lance_gpu.write.commit import (
    SUPPORTED_WRITER_FLAGS,
    PendingCommit,
    check_appendable,
    check_commit_store,
    commit,
    latest,
)

__all__ = ["DatasetExistsError", "write_dataset", "DEFAULT_MAX_ROWS_PER_FILE", "DEFAULT_MAX_BYTES_PER_FILE"]

DEFAULT_MAX_ROWS_PER_FILE = 1024 * 1024
DEFAULT_MAX_BYTES_PER_FILE = 90 * 1024**3
_VERSIONS = {"2.1": 1, "2.2": 2, "stable": 2}



def _minor_of(version: str | None) -> int:
    if version is None:
        return 2
    key = str(version).strip().lower()
    if key not in _VERSIONS:
        raise UnsupportedFeatureError(
            f"data_storage_version {version!r} cannot be written; lance-gpu writes '2.1' and '2.2' ('stable')"
        )
    return _VERSIONS[key]


def _from_dataframe_library(data: object) -> object:
    """A cuDF or Polars DataFrame as a pyarrow Table (cuDF copies device columns to the
    host, the index left out as for pandas with ``preserve_index=False``); anything else
    unchanged.  Checked by module name, so neither library is imported here."""
    lib = type(data).__module__.split(".", 1)[0]
    if lib == "cudf" and hasattr(data, "to_arrow"):
        return data.to_arrow(preserve_index=False)
    if lib == "polars" and hasattr(data, "to_arrow"):
        return data.to_arrow()
    return data


def _as_batches(data: object, schema: pa.Schema | None) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The Arrow schema and a batch iterator of any supported input."""
    try:
        import pandas as pd  # noqa: PLC0415
    except ImportError:  # pragma: no cover - pandas is optional
        pd = None
    if pd is not None and isinstance(data, pd.DataFrame):
        data = pa.Table.from_pandas(data, schema=schema)
    data = _from_dataframe_library(data)
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        if schema is not None and not data.schema.equals(schema):
            try:
                data = data.select(schema.names).cast(schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, KeyError) as exc:
                raise SchemaMismatchError(f"data does not match the given schema: {exc}") from exc
        return data.schema, iter(data.to_batches())
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, iter(data)
    if hasattr(data, "__arrow_c_stream__") and not isinstance(data, Iterable):
        reader = pa.RecordBatchReader.from_stream(data)
        return reader.schema, iter(reader)
    if isinstance(data, Iterable):
        it = iter(data)
        if schema is None:
            try:
                first = next(it)
            except StopIteration:
                raise ValueError("write_dataset got an empty iterable of batches and no schema") from None
            if not isinstance(first, pa.RecordBatch):
                raise TypeError(f"expected pyarrow.RecordBatch items, got {type(first).__name__}")

            def chain() -> Iterator[pa.RecordBatch]:
                yield first
                yield from it

            return first.schema, chain()
        return schema, it
    raise TypeError(
        "data must be a pyarrow Table, RecordBatch, RecordBatchReader, an iterable of "
        f"RecordBatches or a pandas, cuDF or Polars DataFrame, not {type(data).__name__}"
    )


def _check_types(schema: LanceSchema, minor: int) -> None:
    for f in schema.walk():
        if f.logical_type == "map" and minor < 2:
            raise UnsupportedFeatureError(f"field {f.dotted_path!r}: map columns need data_storage_version 2.2")
        if f.logical_type == "json":
            raise UnsupportedFeatureError(f"field {f.dotted_path!r}: arrow.json columns cannot be written yet")
        if f.logical_type.startswith("fixed_size_list:struct"):
            raise UnsupportedFeatureError(f"field {f.dotted_path!r}: fixed-size lists of structs cannot be written")


def _strip(t: pa.DataType) -> pa.DataType:
    """``t`` with the types Lance stores for view types (what a read gives back)."""
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    return t


def _append_plan(target: pa.Schema, incoming: pa.Schema) -> list[int]:
    """Column order of ``incoming`` that gives ``target``; SchemaMismatchError if impossible."""
    names = incoming.names
    if sorted(names) != sorted(target.names) or len(set(names)) != len(names):
        raise SchemaMismatchError(
            f"appended data has columns {names}, the dataset has {target.names}"
        )
    order = []
    for f in target:
        i = names.index(f.name)
        g = incoming.field(i)
        if not _strip(g.type).equals(f.type, check_metadata=False):
            raise SchemaMismatchError(
                f"column {f.name!r}: appended data has type {g.type}, the dataset {f.type}"
            )
        if g.nullable and not f.nullable:
            raise SchemaMismatchError(f"column {f.name!r} is not nullable in the dataset but nullable in the data")
        order.append(i)
    return order


_SYNC_POOL: ThreadPoolExecutor | None = None


def _sync_pool() -> ThreadPoolExecutor:
    """One thread that fsyncs and closes finished data files while the next is encoded."""
    global _SYNC_POOL
    if _SYNC_POOL is None:
        _SYNC_POOL = ThreadPoolExecutor(1, thread_name_prefix="lance-gpu-fsync")
    return _SYNC_POOL


def _forget_sync_pool() -> None:
    global _SYNC_POOL
    _SYNC_POOL = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_sync_pool)


def _data_file(path: str, schema: LanceSchema, minor: int, size: int) -> table_pb2.DataFile:
    leaves = schema.leaf_ids
    return table_pb2.DataFile(
        path=path,
        fields=leaves,
        column_indices=list(range(len(leaves))),
        file_major_version=2,
        file_minor_version=minor,
        file_size_bytes=size,
    )


def _write_fragments(
    store: ObjectStore,
    root: str,
    schema: LanceSchema,
    arrow_schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
    order: list[int] | None,
    minor: int,
    max_rows_per_file: int,
    max_bytes_per_file: int,
) -> tuple[list[table_pb2.DataFragment], list[str]]:
    """Write ``batches`` as new data files under ``root/data/`` (nothing committed); on any
    failure every file begun here is removed.  Returns the fragments and the files' keys."""
    from lance_gpu.write.file_writer import LanceFileWriter  # the encoders load on first use

    data_dir = join(root, "data")
    fragments: list[table_pb2.DataFragment] = []
    written: list[str] = []
    writer = None
    name = ""
    not_null = [i for i, f in enumerate(arrow_schema) if not f.nullable]

    syncing: list[Future] = []  # fsync + close of finished files, in the background

    # A full file's last pages are queued at once; its metadata is written (waiting for
    # them) only once the next file has pages queued too, so no encoder idles in between.
    closing: tuple[LanceFileWriter, str] | None = None

    def finish_closing() -> None:
        nonlocal closing
        if closing is None:
            return
        w, wname = closing
        closing = None
        size = w.finish(sync=False)
        syncing.append(_sync_pool().submit(w.sync_close))
        frag = table_pb2.DataFragment(physical_rows=w.num_rows)
        frag.files.append(_data_file(wname, schema, minor, size))
        fragments.append(frag)

    def close() -> None:
        nonlocal writer, closing
        assert writer is not None
        finish_closing()
        writer.flush()
        closing = (writer, name)
        writer = None

    try:
        for batch in batches:
            if order is not None:
                cols = [batch.column(i) for i in order]
                cols = [c if c.type == f.type else c.cast(f.type) for c, f in zip(cols, arrow_schema)]
                batch = pa.RecordBatch.from_arrays(cols, schema=arrow_schema)
            for i in not_null:
                if batch.column(i).null_count:
                    raise SchemaMismatchError(f"column {arrow_schema.field(i).name!r} is not nullable but holds nulls")
            while batch.num_rows:
                if writer is None:
                    name = f"{uuid.uuid4().hex}.lance"
                    path = join(data_dir, name)
                    written.append(path)
                    writer = LanceFileWriter(path, schema, minor, store=store)
                take = min(batch.num_rows, max_rows_per_file - writer.num_rows)
                writer.write(batch.slice(0, take))
                batch = batch.slice(take)
                if closing is not None and writer.encoding:
                    finish_closing()
                if writer.num_rows >= max_rows_per_file or writer.bytes_written >= max_bytes_per_file:
                    close()
        if writer is not None:
            close()
        finish_closing()
        for fut in syncing:
            fut.result()
    except BaseException:
        wait(syncing)
        if closing is not None:
            closing[0].abort()
        if writer is not None:
            writer.abort()
        remove_quietly(store, written)
        raise
    return fragments, written


def remove_quietly(store: ObjectStore, keys: Iterable[str]) -> None:
    """Delete objects that were written but cannot have been committed (best effort)."""
    for key in keys:
        try:
            store.delete(key)
        except OSError:
            pass


def write_dataset(
    data: object,
    uri: str | os.PathLike[str],
    schema: pa.Schema | None = None,
    mode: str = "create",
    *,
    data_storage_version: str | None = None,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_bytes_per_file: int = DEFAULT_MAX_BYTES_PER_FILE,
    storage_options: dict[str, str] | None = None,
    store: object = None,
    progress: ProgressHook | None = None,
):
    """Write ``data`` as a new version of the Lance dataset at ``uri``.

    ``data``: a pyarrow Table, RecordBatch, RecordBatchReader, an iterable of RecordBatches
    (streamed), or a pandas, cuDF or Polars DataFrame.  ``mode``: ``"create"`` (the dataset must not exist:
    :class:`DatasetExistsError`, nothing written), ``"append"`` (creates the dataset if
    missing; the data's schema must equal the dataset's, else :class:`SchemaMismatchError`
    before anything is written) or ``"overwrite"``.  ``data_storage_version``: ``"2.1"`` or
    ``"2.2"`` (default; ``"stable"``) for new datasets -- appends keep the dataset's version.
    ``progress``: a :data:`lance_gpu.progress.ProgressHook`, told ``("rows written", done, total)``
    as batches are taken (``total`` known for tables, None for streams).

    ``uri`` may be any URI :func:`lance_gpu.io.resolve` takes (``s3://``, ``memory://``...),
    with pylance's ``storage_options``, or a path inside ``store`` (an ObjectStore, obstore
    store or fsspec file system).  Commits need a store with conditional writes.

    Returns the :class:`~lance_gpu.dataset.LanceDataset` at the committed version.
    """
    from lance_gpu.dataset import LanceDataset

    if mode not in ("create", "append", "overwrite"):
        raise ValueError(f"mode must be 'create', 'append' or 'overwrite', not {mode!r}")
    if max_rows_per_file < 1 or max_bytes_per_file < 1:
        raise ValueError("max_rows_per_file and max_bytes_per_file must be positive")
    ostore, root = resolve(uri, storage_options, store=store)
    minor = _minor_of(data_storage_version)
    arrow_schema, batches = _as_batches(data, schema)
    total = data.num_rows if isinstance(data, (pa.Table, pa.RecordBatch)) else None
    batches = count_rows(batches, progress, "rows written", total)
    base, naming = latest(ostore, root)
    if mode == "create" and (base is not None):
        raise DatasetExistsError(f"dataset {ostore.uri(root)} already exists (use mode='append' or 'overwrite')")
    check_commit_store(ostore, root)
    order = None
    if mode == "append" and base is not None:
        check_appendable(base)
        lance_schema = LanceSchema.from_manifest(base.manifest, base.path)
        minor = int(base.manifest.data_format.version.split(".")[1])
        target = lance_schema.to_arrow(physical=True)
        order = _append_plan(target, arrow_schema)
        if order == list(range(len(order))) and all(
            _strip(g.type).equals(f.type) for f, g in zip(target, arrow_schema)
        ):
            order = None
        arrow_schema = target if order is not None else arrow_schema
        kind = "append"
    else:
        lance_schema = LanceSchema.from_arrow(arrow_schema)
        kind = "overwrite"
        if base is not None:  # mode == "overwrite"
            check_writer_flags(base.manifest.writer_feature_flags, base.path, SUPPORTED_WRITER_FLAGS)
    _check_types(lance_schema, minor)
    fragments, written = _write_fragments(
        ostore, root, lance_schema, arrow_schema, batches, order, minor, max_rows_per_file, max_bytes_per_file
    )
    op = PendingCommit(kind, fragments, schema=lance_schema, data_format=f"2.{minor}")
    try:
        manifest = commit(ostore, root, op, base, naming)
    except BaseException:
        remove_quietly(ostore, written)
        raise
    return LanceDataset(root, int(manifest.version), storage_options=storage_options, store=ostore)
