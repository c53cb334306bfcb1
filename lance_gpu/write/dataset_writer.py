# SPDX-License-Identifier: Apache-2.0
"""``write_dataset``: Arrow data to Lance data files and a committed version.

Data is streamed batch by batch into data files of at most ``max_rows_per_file`` rows (a
file is also closed at the first batch boundary after it reaches ``max_bytes_per_file``);
each file is one fragment.  Memory holds at most one page per field being encoded plus
the batch in hand.  Nothing is visible to readers until the commit
(:mod:`lance_gpu.txn.publish`) publishes the new manifest; a failed write deletes the data
files it wrote.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import pyarrow as pa

from lance_gpu._proto import table_pb2
from lance_gpu.errors import (
    DatasetExistsError,
    IncompatibleSchemaError,
    LegacyFormatError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from lance_gpu.file.legacy import LEGACY_MAJOR, LEGACY_MINOR
from lance_gpu.file.writer.blobs import blob_v2_schema, column_field_ids, is_blob_input
from lance_gpu.file.writer.container import check_writable_types
from lance_gpu.io import ObjectStore, join, resolve
from lance_gpu.io.background import ProcessPool
from lance_gpu.io.resolve import is_memory_uri, renew_memory_root
from lance_gpu.io.store import remove_quietly
from lance_gpu.progress import count_rows
from lance_gpu.table import features
from lance_gpu.table.features import check_writer_flags
from lance_gpu.table.manifest import ManifestFile
from lance_gpu.table.schema import LanceSchema
from lance_gpu.table.versions import storage_version
from lance_gpu.txn.commit import commit_file
from lance_gpu.txn.fragment import FragmentMetadata
from lance_gpu.txn.legacy_dictionaries import dataset_dictionaries
from lance_gpu.txn.operations import Append, Overwrite
from lance_gpu.txn.publish import SUPPORTED_WRITER_FLAGS, check_appendable, check_commit_store, latest
from lance_gpu.write.device_input import DeviceBatch
from lance_gpu.write.file_writer import LanceFileWriter
from lance_gpu.write.inputs import coerce_input
from lance_gpu.write.legacy_file import (
    DEFAULT_ROWS_PER_BATCH,
    LEGACY_STORAGE_VERSION,
    LegacyFileWriter,
    check_legacy_types,
)

__all__ = ["DEFAULT_MAX_BYTES_PER_FILE", "DEFAULT_MAX_ROWS_PER_FILE", "DatasetExistsError", "write_committed", "write_version"]

DEFAULT_MAX_ROWS_PER_FILE = 1024 * 1024
DEFAULT_MAX_BYTES_PER_FILE = 90 * 1024**3
#: The ``minor`` standing for legacy (0.1) files where the writer passes a file version
#: 2.``minor`` around.
LEGACY = -1
_VERSIONS = {"legacy": LEGACY, "0.1": LEGACY, "2.0": 0, "2.1": 1, "2.2": 2, "stable": 2}


def storage_version_name(minor: int) -> str:
    """The ``data_storage_version`` files of version ``minor`` make: ``"0.1"`` or ``"2.minor"``."""
    return LEGACY_STORAGE_VERSION if minor == LEGACY else f"2.{minor}"


def dataset_file_minor(manifest: table_pb2.Manifest) -> int:
    """The file version a dataset's new data files get, as the writer's ``minor``:
    :data:`LEGACY` for a legacy (0.1) dataset, else 2.``minor`` of its data storage version."""
    return _minor_of(storage_version(manifest))


def data_file_writer(path: str, schema: LanceSchema, minor: int, store: ObjectStore,
                     rows_per_group: int = DEFAULT_ROWS_PER_BATCH,
                     dictionaries: dict[int, pa.Array] | None = None,
                     dataset_dictionaries: frozenset[int] = frozenset()) -> LanceFileWriter | LegacyFileWriter:
    """A writer of one new data file of version ``minor`` (:data:`LEGACY`: a legacy file
    in batches of ``rows_per_group`` rows, its dictionary fields encoded with
    ``dictionaries``, those of ``dataset_dictionaries`` the dataset's: see :class:`LegacyFileWriter`)."""
    if minor == LEGACY:
        return LegacyFileWriter(path, schema, rows_per_group, store=store, dictionaries=dictionaries,
                                dataset_dictionaries=dataset_dictionaries)
    return LanceFileWriter(path, schema, minor, store=store)


def _check_append_version(requested: str | None, base_version: str) -> None:
    """pylance refuses to mix legacy (V1) and V2 data files in one dataset: an append asking
    for a data storage version on the other side of that line than the dataset's."""
    if requested is None:
        return
    minor = _minor_of(requested)
    base_legacy = base_version in ("0.1", "legacy")
    if (minor == LEGACY) != base_legacy:
        raise LegacyFormatError(
            f"Invalid user input: Cannot append data files in version {storage_version_name(minor)} to a dataset "
            f"with default version {base_version}: V1 and V2 storage versions cannot be mixed"
        )



def _minor_of(version: str | None) -> int:
    if version is None:
        return 2
    key = str(version).strip().lower()
    if key not in _VERSIONS:
        raise UnsupportedFeatureError(
            f"data_storage_version {version!r} cannot be written; lance-gpu writes 'legacy' ('0.1'), '2.0', '2.1' and '2.2' ('stable')"
        )
    return _VERSIONS[key]


def _check_types(schema: LanceSchema, minor: int) -> None:
    """Raise for a field files of version ``minor`` cannot store (checked once per field
    tree and version: a schema that passed is remembered, :meth:`LanceSchema.derived`)."""
    schema.derived(("writable types", minor), lambda: _checked_types(schema, minor))


def _checked_types(schema: LanceSchema, minor: int) -> bool:
    if minor == LEGACY:
        check_legacy_types(schema)
    else:
        check_writable_types(schema, minor)
    return True


def _is_json(t: pa.DataType) -> bool:
    return getattr(t, "extension_name", None) == "arrow.json"


def _strip(t: pa.DataType) -> pa.DataType:
    """``t`` with the types Lance stores for view and JSON types (what a physical read
    gives back: JSON text is stored as JSONB in large_binary)."""
    if _is_json(t):
        return pa.large_binary()
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    return t


def _append_plan(target: pa.Schema, incoming: pa.Schema) -> list[int]:
    """Column of ``incoming`` for each column of ``target`` (-1: missing, written as nulls),
    as pylance appends: columns in any order, missing nullable columns allowed; a column the
    dataset lacks, a missing non-nullable column or a type other than the column's (even a
    castable one) raise :class:`IncompatibleSchemaError` (pylance: ``OSError``, "Append with
    different schema").  Nullable data may go into a non-nullable column (rows holding nulls
    there are refused as they are written)."""
    names = incoming.names
    if len(set(names)) != len(names):
        raise SchemaMismatchError(f"appended data has duplicate columns: {names}")
    unexpected = [n for n in names if n not in target.names]
    missing = [f.name for f in target if f.name not in names]
    if unexpected or any(not target.field(n).nullable for n in missing):
        raise IncompatibleSchemaError(
            f"Append with different schema: appended data has columns {names}, the dataset has {target.names} "
            f"(missing={missing}, unexpected={unexpected}; only nullable columns may be left out)"
        )
    order = []
    for f in target:
        if f.name not in names:
            order.append(-1)
            continue
        i = names.index(f.name)
        g = incoming.field(i)
        if is_blob_input(f):
            if not is_blob_input(g):
                raise SchemaMismatchError(f"column {f.name!r}: the dataset holds blobs, the data {g.type} without "
                                          "the lance-encoding:blob flag")
            order.append(i)
            continue
        if not _strip(g.type).equals(f.type, check_metadata=False):
            raise IncompatibleSchemaError(
                f"Append with different schema: column {f.name!r} should have type {f.type} but the data has {g.type}"
            )
        if (f.metadata or {}).get(b"ARROW:extension:name") == b"lance.json" and not (
            _is_json(g.type) or (g.metadata or {}).get(b"ARROW:extension:name") == b"lance.json"
        ):
            raise SchemaMismatchError(f"column {f.name!r}: the dataset holds JSON, the data {g.type}")
        order.append(i)
    return order


#: Data files at least this large start their fsync in the background as soon as they are
#: published (their write-back overlaps the encoding of the next file); smaller ones are
#: synced by the commit's one round alone -- an early fsync of a small file only makes the
#: commit's next metadata steps (transaction file, manifest staging) wait on a journal
#: commit it started.
EARLY_SYNC_BYTES = 4 * 1024 * 1024


_SYNC_POOL = ProcessPool(lambda: 1, "lance-gpu-fsync")


def _sync_pool() -> ThreadPoolExecutor:
    """One thread that fsyncs published data files while the next is encoded (FIFO)."""
    return _SYNC_POOL.get()


def _sync_quietly(store: ObjectStore, key: str) -> None:
    """Start a published data file's write-back early (the commit's sync of it then finds
    it clean); a failure is left to that sync to report."""
    try:
        store.sync([key])
    except OSError:
        pass


def _data_file(path: str, schema: LanceSchema, minor: int, size: int) -> table_pb2.DataFile:
    if minor == LEGACY:  # every field id (structs and lists too), no column indices
        return table_pb2.DataFile(path=path, fields=schema.field_ids, file_major_version=LEGACY_MAJOR,
                                  file_minor_version=LEGACY_MINOR, file_size_bytes=size)
    leaves, columns = schema.derived(("data file columns", minor), lambda: _file_column_ids(schema, minor))
    return table_pb2.DataFile(
        path=path,
        fields=leaves,
        column_indices=columns,
        file_major_version=2,
        file_minor_version=minor,
        file_size_bytes=size,
    )


def _file_column_ids(schema: LanceSchema, minor: int) -> tuple[list[int], list[int]]:
    """A 2.``minor`` data file's ``fields`` and ``column_indices`` for ``schema`` (made once per
    field tree: :meth:`LanceSchema.derived`)."""
    leaves = column_field_ids(schema, minor)
    return leaves, list(range(len(leaves)))


def data_file_name() -> str:
    """A new data file's name as pylance 14 names them: a random 128-bit id written as its
    first 24 bits in binary (spreading object-store key prefixes) then the other 104 bits
    in hex -- 50 characters -- and ``.lance``."""
    bits = uuid.uuid4().int
    return f"{bits >> 104:024b}{bits & ((1 << 104) - 1):026x}.lance"


def fragment_events(
    tracker: object, fragment_id: int = 0, begin_with_file: bool = False
) -> Callable[[str, table_pb2.DataFragment], None] | None:
    """The ``events`` adapter of :func:`_write_fragments` for a pylance-style tracker (an
    object with ``begin`` / ``complete`` methods, :class:`lance_gpu.progress.FragmentWriteProgress`),
    or None without one: each is called with the fragment as
    :class:`~lance_gpu.txn.fragment.FragmentMetadata` (id ``fragment_id``).  At ``begin``,
    as pylance's: ``physical_rows`` None, and no files -- or, with ``begin_with_file``
    (``LanceFragment.create``), the file about to be written (its path and version; no
    fields, size None)."""
    if tracker is None or not (hasattr(tracker, "begin") or hasattr(tracker, "complete")):
        return None

    def event(kind: str, frag: table_pb2.DataFragment) -> None:
        hook = getattr(tracker, kind, None)
        if not callable(hook):
            return
        meta = FragmentMetadata.from_pb(frag)
        meta.id = fragment_id
        if kind == "begin":
            meta.physical_rows = None  # type: ignore[assignment]
            if not begin_with_file:
                meta.files = []
            for f in meta.files:
                f.file_size_bytes = None
        hook(meta)

    return event


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
    events: Callable[[str, table_pb2.DataFragment], None] | None = None,
    rows_per_group: int = DEFAULT_ROWS_PER_BATCH,
    dictionaries: dict[int, pa.Array] | None = None,
    *,
    size_of_flushed_pages: bool = False,
) -> tuple[list[table_pb2.DataFragment], list[str]]:
    """Write ``batches`` as new data files under ``root/data/`` (nothing committed); on any
    failure every file begun here is removed.  Returns the fragments and the files' keys.

    ``events`` (a per-fragment progress tracker's adapter) is called ``("begin", fragment)``
    before each file is opened (an empty fragment) and ``("complete", fragment)`` once it is
    finished; with it, each file is finished before the next one begins.

    ``minor`` :data:`LEGACY` writes legacy files, in batches of ``rows_per_group`` rows,
    every file's dictionary fields encoded with the same values (``dictionaries``: the
    dataset's, for an append; else the first batch's).

    The files are published unsynced (their fsync starts in the background): only a commit
    (:func:`lance_gpu.txn.commit.commit`, which syncs every file its manifest adds) makes them
    durable, before the manifest that names them is put.

    A file is closed at the first batch boundary where it holds ``max_rows_per_file`` rows or
    ``max_bytes_per_file`` bytes -- counting the Arrow bytes still buffered, or, with
    ``size_of_flushed_pages`` (compaction, as pylance's), only the pages already cut."""

    data_dir = join(root, "data")
    shared_dictionaries = dict(dictionaries or {})
    from_dataset = frozenset(shared_dictionaries)

    fragments: list[table_pb2.DataFragment] = []
    written: list[str] = []
    writer = None
    name = ""
    # the dataset's non-nullable columns (the data's own fields may be nullable)
    not_null = [i for i, f in enumerate(schema.fields) if not f.nullable]

    syncing: list[Future] = []  # early fsyncs of published files, in the background

    # A full file's last pages are queued at once; its metadata is written (waiting for
    # them) only once the next file has pages queued too, so no encoder idles in between.
    closing: tuple[LanceFileWriter | LegacyFileWriter, str] | None = None

    def finish_closing() -> None:
        nonlocal closing
        if closing is None:
            return
        w, wname = closing
        closing = None
        try:
            size = w.finish(sync=False)
            # published unsynced: the commit syncs every file its manifest adds before the
            # manifest is put, so this call (a write_fragments task) never waits on a disk
            w.sync_close(sync=False)
        except BaseException:
            w.abort()  # an encoder failed: drop the staging file
            raise
        if size >= EARLY_SYNC_BYTES:
            syncing.append(_sync_pool().submit(_sync_quietly, store, join(data_dir, wname)))
        frag = table_pb2.DataFragment(physical_rows=w.num_rows)
        frag.files.append(_data_file(wname, schema, minor, size))
        fragments.append(frag)
        if events is not None:
            events("complete", frag)

    def close() -> None:
        nonlocal writer, closing
        assert writer is not None
        finish_closing()
        writer.flush()
        closing = (writer, name)
        writer = None
        if events is not None:
            finish_closing()

    try:
        for batch in batches:
            if order is not None and isinstance(batch, DeviceBatch):
                batch = batch.select(order, arrow_schema)
            elif order is not None:
                cols = [pa.nulls(batch.num_rows, f.type) if i < 0 else batch.column(i) for i, f in zip(order, arrow_schema, strict=True)]
                cols = [c if c.type == f.type or _is_json(c.type) else c.cast(f.type) for c, f in zip(cols, arrow_schema, strict=True)]
                batch = pa.RecordBatch.from_arrays(cols, names=arrow_schema.names)
            for i in not_null:
                if batch.column(i).null_count:
                    raise SchemaMismatchError(f"column {arrow_schema.field(i).name!r} is not nullable but holds nulls")
            while batch.num_rows:
                if writer is None:
                    name = data_file_name()
                    if events is not None:
                        opening = table_pb2.DataFragment()
                        major, file_minor = (LEGACY_MAJOR, LEGACY_MINOR) if minor == LEGACY else (2, minor)
                        opening.files.add(path=name, file_major_version=major, file_minor_version=file_minor)
                        events("begin", opening)
                    path = join(data_dir, name)
                    written.append(path)
                    writer = data_file_writer(path, schema, minor, store, rows_per_group, shared_dictionaries, from_dataset)
                take = min(batch.num_rows, max_rows_per_file - writer.num_rows)
                writer.write(batch.slice(0, take))
                batch = batch.slice(take)
                if closing is not None and writer.encoding:
                    finish_closing()
                size = writer.bytes_flushed if size_of_flushed_pages else writer.bytes_written
                if writer.num_rows >= max_rows_per_file or size >= max_bytes_per_file:
                    close()
        if writer is not None:
            close()
        finish_closing()
    except BaseException:
        wait(syncing)
        if closing is not None:
            closing[0].abort()
        if writer is not None:
            writer.abort()
        remove_quietly(store, written)
        raise
    return fragments, written


def _humantime(seconds: int) -> str:
    """A duration as Rust's ``humantime`` prints it (``"1m 40s"``, ``"14days"``), the form
    pylance stores ``lance.auto_cleanup.older_than`` in."""
    units = [(31_557_600, "year", True), (2_630_016, "month", True), (86_400, "day", True),
             (3600, "h", False), (60, "m", False), (1, "s", False)]
    rest, parts = int(seconds), []
    for size, name, word in units:
        n, rest = divmod(rest, size)
        if n:
            parts.append(f"{n}{name}{'s' if word and n > 1 else ''}")
    return " ".join(parts) or "0s"


def _check_metadata(schema: pa.Schema) -> None:
    """pylance refuses schema or field metadata that is not UTF-8."""
    def check(md: dict | None, where: str) -> None:
        for k, v in (md or {}).items():
            for name, raw in (("key", k), ("value", v)):
                try:
                    bytes(raw).decode("utf-8")
                except UnicodeDecodeError:
                    raise SchemaMismatchError(
                        f"Metadata {name} {raw!r} of {where} is not valid utf8. "
                        "Consider base64 encode for generic binary metadata."
                    ) from None

    check(schema.metadata, "the schema")
    for f in schema:
        check(f.metadata, f"field {f.name!r}")


def write_committed(
    data: object,
    uri: str | os.PathLike[str] | object,
    schema: pa.Schema | None = None,
    mode: str = "create",
    *,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_rows_per_group: int = 1024,
    max_bytes_per_file: int = DEFAULT_MAX_BYTES_PER_FILE,
    commit_lock: object = None,
    progress: object = None,
    storage_options: dict[str, str] | None = None,
    store: object = None,
    data_storage_version: str | None = None,
    use_legacy_format: bool | None = None,
    enable_v2_manifest_paths: bool = True,
    enable_stable_row_ids: bool = False,
    auto_cleanup_options: dict[str, int] | None = None,
    commit_message: str | None = None,
    transaction_properties: dict[str, str] | None = None,
) -> tuple[ObjectStore, str, ManifestFile]:
    """:func:`write_version` (the same parameters), returning the store, the dataset's root
    key there and the manifest file the commit wrote (the dataset at the new version opens
    from it without a read)."""

    if use_legacy_format is not None and data_storage_version is None:
        data_storage_version = "legacy" if use_legacy_format else "stable"
    if not isinstance(uri, (str, os.PathLike)):
        uri = getattr(uri, "uri", uri)
    if mode not in ("create", "append", "overwrite"):
        raise ValueError(f"mode must be 'create', 'append' or 'overwrite', not {mode!r}")
    if max_rows_per_file < 1 or max_bytes_per_file < 1:
        raise ValueError("max_rows_per_file and max_bytes_per_file must be positive")
    ostore, root = resolve(uri, storage_options, store=store)  # type: ignore[arg-type]
    minor = _minor_of(data_storage_version)
    arrow_schema, batches = coerce_input(data, schema, device=True)
    _check_metadata(arrow_schema)
    # progress: pylance's FragmentWriteProgress (begin / complete per fragment), or our
    # ProgressHook callable told ("rows written", done, total) as batches are taken.
    fragment_progress = progress if hasattr(progress, "begin") or hasattr(progress, "complete") else None
    row_progress = progress if fragment_progress is None and callable(progress) else None
    total = data.num_rows if isinstance(data, (pa.Table, pa.RecordBatch)) else None
    batches = count_rows(batches, row_progress, "rows written", total)
    base, naming = latest(ostore, root)
    if base is None:
        naming = "V2" if enable_v2_manifest_paths else "V1"
    if mode == "create" and base is not None and store is None and is_memory_uri(uri):
        ostore, root = renew_memory_root(uri)  # type: ignore[arg-type]  # pylance's per-call memory store
        base, naming = latest(ostore, root)
    # the base's fields but its fragments (all a write looks at, unless an early pylance left
    # the data storage version unset: then its data files say it)
    base_meta = None if base is None else base.head if base.head.data_format.version else base.manifest
    if mode == "overwrite" and base_meta is not None and data_storage_version is None:
        minor = dataset_file_minor(base_meta)  # pylance: an overwrite keeps the dataset's version
    if mode == "create" and (base is not None):
        raise DatasetExistsError(f"dataset {ostore.uri(root)} already exists (use mode='append' or 'overwrite')")
    check_commit_store(ostore, root, locked=commit_lock is not None)
    order = None
    dictionaries: dict[int, pa.Array] = {}
    if mode == "append" and base is not None and base_meta is not None:
        check_appendable(base)
        lance_schema = LanceSchema.from_manifest(base_meta, base.path)
        base_version = storage_version(base_meta)
        _check_append_version(data_storage_version, base_version)
        minor = dataset_file_minor(base_meta)
        if minor == LEGACY:
            dictionaries = dataset_dictionaries(ostore, root, base.manifest)
        target = lance_schema.to_arrow(physical=True)
        if arrow_schema.equals(target, check_metadata=True):
            order = None  # the dataset's own schema, metadata included: what _append_plan accepts as is
        else:
            order = _append_plan(target, arrow_schema)
            if order == list(range(len(order))) and all(
                _strip(g.type).equals(f.type) for f, g in zip(target, arrow_schema, strict=False)
            ):
                order = None
        arrow_schema = target if order is not None else arrow_schema
        kind = "append"
    else:
        lance_schema = LanceSchema.from_arrow(blob_v2_schema(arrow_schema, minor))
        kind = "overwrite"
        if base is not None:  # mode == "overwrite"
            check_writer_flags(base.head.writer_feature_flags, base.path, SUPPORTED_WRITER_FLAGS)
    _check_types(lance_schema, minor)
    fragments, written = _write_fragments(
        ostore, root, lance_schema, arrow_schema, batches, order, minor, max_rows_per_file, max_bytes_per_file,
        fragment_events(fragment_progress), max_rows_per_group, dictionaries,
    )
    config: dict[str, str] = {}
    if auto_cleanup_options is not None and base is None:
        config["lance.auto_cleanup.interval"] = str(int(auto_cleanup_options["interval"]))
        config["lance.auto_cleanup.older_than"] = _humantime(int(auto_cleanup_options["older_than_seconds"]))
    if kind == "append":
        op: Append | Overwrite = Append(fragments)
    else:
        flags = features.FLAG_STABLE_ROW_IDS if enable_stable_row_ids and base is None else 0
        op = Overwrite(lance_schema, fragments, data_storage_version=storage_version_name(minor), config=config, writer_flags=flags)
    op.written.extend(written)
    properties = dict(transaction_properties or {})
    if commit_message is not None:
        properties["__lance_commit_message"] = commit_message
    committed = commit_file(
        ostore, root, op, base, naming, mode=mode, transaction_properties=properties,
        lock=commit_lock,  # type: ignore[arg-type]
        base_from_hint=base is not None,  # (latest() above read the hint)
    )
    return ostore, root, committed


def write_version(data: object, uri: str | os.PathLike[str] | object, schema: pa.Schema | None = None,
                  mode: str = "create", **options: Any) -> int:
    """Write ``data`` as a new version of the Lance dataset at ``uri`` (pylance's
    ``lance.write_dataset``).

    Parameters
    ----------
    data : ReaderLike
        A pyarrow Table, RecordBatch, RecordBatchReader, Dataset or Scanner, a Lance dataset,
        an ``__arrow_c_stream__`` object, a pandas, Polars or cuDF DataFrame, a dict of
        columns, a list of dicts, or an iterable of RecordBatches (streamed; cast to
        ``schema`` -- an impossible cast raises :class:`SchemaMismatchError` before anything
        is written).
    uri : str, Path or dataset
        Where the dataset is: any URI :func:`lance_gpu.io.resolve` takes (a path,
        ``file://``, ``s3://``, ``gs://``, ``az://``, ``memory://``...), or a path inside
        ``store``.  Commits need a store with conditional writes.
    schema : pyarrow.Schema, optional
        The schema of ``data``.
    mode : str, default "create"
        ``"create"`` (the dataset must not exist: :class:`DatasetExistsError`, nothing
        written; also for the loser of a race), ``"append"`` (creates the dataset if missing;
        the data's columns must match the dataset's) or ``"overwrite"``.
    max_rows_per_file : int, default 1 Mi
        Rows per data file (each file is one fragment).
    max_rows_per_group : int, default 1024
        Rows per batch of legacy (0.1) files, as pylance; for 2.x files lance-gpu chooses
        its own page sizes.
    max_bytes_per_file : int, default 90 GiB
        A file is closed at the first batch boundary after it reaches this size.
    commit_lock : callable, optional
        ``commit_lock(version)`` returns a context manager held while publishing; with one,
        a store without conditional writes is accepted (the lock guards the manifest's
        check-then-put, so every writer of the dataset must take the same lock).
    progress : FragmentWriteProgress or callable, optional
        pylance's ``FragmentWriteProgress``: ``begin(fragment)`` / ``complete(fragment)`` are
        called for each written fragment; or a :data:`lance_gpu.progress.ProgressHook`
        ``progress(task, done, total)``, told ``("rows written", done, total)`` as batches are
        taken (``total`` known for tables, None for streams).
    storage_options : dict, optional
        pylance's storage options (credentials, endpoint, ``allow_http``, timeouts, retries).
    store : optional
        An :class:`lance_gpu.io.ObjectStore`, obstore store or fsspec file system to write to.
    data_storage_version : str, optional
        ``"legacy"`` / ``"0.1"``, ``"2.0"``, ``"2.1"``, ``"2.2"`` or ``"stable"`` (default
        2.2) for new datasets; appends, and overwrites not asking for one, keep the
        dataset's version (asking an append for a V2 version
        when appending to a legacy dataset, or legacy for a V2 one, is pylance's error,
        :class:`LegacyFormatError`).
    use_legacy_format : bool, optional
        Deprecated: ``True`` means ``"legacy"``, ``False`` ``"stable"``.
    enable_v2_manifest_paths : bool, default True
        New datasets name manifests ``{u64::MAX - version:020}.manifest`` (else ``{version}.manifest``).
    enable_stable_row_ids : bool, default False
        New datasets give rows stable ids.
    auto_cleanup_options : dict, optional
        ``{"interval": n, "older_than_seconds": s}`` stored in the new dataset's config.
    commit_message : str, optional
        Stored in the transaction's properties.
    transaction_properties : dict, optional
        Stored in the transaction.

    Returns
    -------
    int
        The committed version (``lance_gpu.write_dataset`` returns the dataset at it).
    """
    return int(write_committed(data, uri, schema, mode, **options)[2].head.version)
