# SPDX-License-Identifier: Apache-2.0
"""Distributed writes: write fragments anywhere, commit them once (pylance's commit API).

pylance's pattern, for writers such as Ray, Dask or Spark jobs whose tasks each write data
files and whose driver commits::

    read = lance_gpu.dataset(uri).version                          # driver
    frags = write_fragments(batches, uri, schema=schema)           # each task (FragmentMetadata)
    op = LanceOperation.Append(all_frags)                          # driver
    ds = LanceDataset.commit(uri, op, read_version=read)

:func:`write_fragments` writes data files under ``{uri}/data`` and returns their
:class:`~lance_gpu.txn.fragment.FragmentMetadata` (id 0: ids are handed out at commit; they
pickle and JSON round-trip, so they travel between processes).  Nothing is visible until a
commit publishes a version; :func:`discard_fragments` deletes the files of fragments that
will never be committed.  :func:`create_fragment` is ``LanceFragment.create``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from lance_gpu._proto import table_pb2
from lance_gpu.errors import EmptyWriteError
from lance_gpu.file.writer.blobs import blob_v2_schema
from lance_gpu.io import ObjectStore, join
from lance_gpu.io.store import remove_quietly
from lance_gpu.table.features import check_writer_flags
from lance_gpu.table.schema import LanceSchema
from lance_gpu.table.versions import storage_version
from lance_gpu.txn.fragment import FragmentMetadata
from lance_gpu.txn.operations import Append, Overwrite
from lance_gpu.txn.publish import SUPPORTED_WRITER_FLAGS, check_appendable, latest
from lance_gpu.txn.transaction import Transaction, resolve_target
from lance_gpu.write.dataset_writer import (
    DEFAULT_MAX_BYTES_PER_FILE,
    DEFAULT_MAX_ROWS_PER_FILE,
    _append_plan,
    _check_append_version,
    _check_types,
    _minor_of,
    _strip,
    _write_fragments,
    fragment_events,
    storage_version_name,
)
from lance_gpu.write.inputs import coerce_input
from lance_gpu.write.legacy_file import DEFAULT_ROWS_PER_BATCH

__all__ = ["create_fragment", "discard_fragments", "write_fragments"]


def _target(store: ObjectStore, root: str, mode: str, arrow_schema: pa.Schema, data_storage_version: str | None,
            version_wins: bool = False):
    """(base manifest or None, Lance schema, Arrow schema to write, column order, minor).

    Appending to an existing dataset writes its file version; a ``data_storage_version``
    across the legacy / V2 line from it is refused (pylance's ``write_fragments``), or,
    with ``version_wins`` (``LanceFragment.create``), is written as asked."""
    base, _naming = latest(store, root)
    if mode == "append" and base is not None:
        check_appendable(base)
        base_version = storage_version(base.manifest)
        if not version_wins:
            _check_append_version(data_storage_version, base_version)
        schema = LanceSchema.from_manifest(base.manifest, base.path)
        target = schema.to_arrow(physical=True)
        plan = _append_plan(target, arrow_schema)
        order: list[int] | None = plan
        if plan == list(range(len(plan))) and all(_strip(g.type).equals(f.type) for f, g in zip(target, arrow_schema, strict=False)):
            order = None
        minor = _minor_of(data_storage_version if version_wins and data_storage_version else base_version)
        return base, schema, (target if order is not None else arrow_schema), order, minor
    if base is not None:
        check_writer_flags(base.manifest.writer_feature_flags, base.path, SUPPORTED_WRITER_FLAGS)
    minor = _minor_of(data_storage_version)
    schema = LanceSchema.from_arrow(blob_v2_schema(arrow_schema, minor))
    _check_types(schema, minor)
    return base, schema, arrow_schema, None, minor


def write_fragments(
    data: object,
    dataset_uri: str | os.PathLike[str] | Any,
    schema: pa.Schema | None = None,
    *,
    return_transaction: bool = False,
    mode: str = "append",
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    max_rows_per_group: int | None = 1024,
    max_bytes_per_file: int = DEFAULT_MAX_BYTES_PER_FILE,
    progress: Any = None,
    data_storage_version: str | None = None,
    use_legacy_format: bool | None = None,
    storage_options: dict[str, str] | None = None,
    enable_stable_row_ids: bool = False,
) -> list[FragmentMetadata] | Transaction:
    """Write ``data`` as new data files of the dataset at ``dataset_uri`` without committing
    them (pylance's ``lance.fragment.write_fragments``).

    Parameters
    ----------
    data : ReaderLike
        Anything :func:`lance_gpu.write_dataset` takes; streamed and cast to ``schema``.
    dataset_uri : str, Path or dataset
        The dataset the fragments are for (it need not exist yet).
    schema : pyarrow.Schema, optional
        The schema of ``data``.
    return_transaction : bool, default False
        Return a :class:`~lance_gpu.txn.transaction.Transaction` (an ``Append``, or an
        ``Overwrite`` for ``mode="overwrite"`` / a new dataset) instead of the fragments.
    mode : str, default "append"
        ``"append"`` writes with the existing dataset's schema, field ids and file version
        (columns in any order; types must match, else :class:`SchemaMismatchError` before
        anything is written); ``"create"`` / ``"overwrite"`` (or a dataset that does not
        exist yet) use the data's schema and ``data_storage_version``.
    max_rows_per_file : int, default 1 Mi
        Each file of at most this many rows is one fragment.
    max_rows_per_group : int, optional
        Rows per batch of legacy (0.1) files, as pylance; for 2.x files lance-gpu chooses
        its own page sizes.
    max_bytes_per_file : int
        A file is closed at the first batch boundary after it reaches this size.
    progress : FragmentWriteProgress, optional
        A per-fragment tracker (:class:`lance_gpu.progress.FragmentWriteProgress`):
        ``begin`` before each fragment's file is opened, ``complete`` once it is written.
    data_storage_version : str, optional
        ``"legacy"`` / ``"0.1"``, ``"2.0"``, ``"2.1"``, ``"2.2"`` (``"stable"``) for new
        datasets; appends write the dataset's version (one across the legacy / V2 line
        from it is refused: :class:`~lance_gpu.errors.LegacyFormatError`, an ``OSError``).
    use_legacy_format : bool, optional
        Deprecated: ``True`` means ``"legacy"``, ``False`` ``"stable"``.
    storage_options, enable_stable_row_ids
        As pylance's (stable row ids are assigned at commit).

    Returns
    -------
    list of FragmentMetadata, or Transaction when ``return_transaction``.
    """
    if use_legacy_format is not None and data_storage_version is None:
        data_storage_version = "legacy" if use_legacy_format else "stable"
    base, lance_schema, fragments, minor = _write_uncommitted(
        data, dataset_uri, schema, mode, max_rows_per_file, max_bytes_per_file, progress, 0,
        data_storage_version, storage_options, rows_per_group=max_rows_per_group,
    )
    if not return_transaction:
        return fragments

    if mode == "append" and base is not None:
        return Transaction(int(base.manifest.version), Append(fragments))
    return Transaction(
        0 if base is None else int(base.manifest.version),
        Overwrite(lance_schema, fragments, data_storage_version=storage_version_name(minor)),
    )


def _write_uncommitted(
    data: object, dataset_uri: Any, schema: pa.Schema | None, mode: str, max_rows_per_file: int,
    max_bytes_per_file: int, progress: Any, fragment_id: int, data_storage_version: str | None,
    storage_options: dict[str, str] | None, begin_with_file: bool = False, rows_per_group: int | None = None,
    version_wins: bool = False,
) -> tuple[Any, LanceSchema, list[FragmentMetadata], int]:
    """The files of :func:`write_fragments`: (base manifest or None, the schema written,
    the fragments, the file minor version); ``progress`` is told of fragment ``fragment_id``."""
    if mode not in ("create", "append", "overwrite"):
        raise ValueError(f"mode must be 'create', 'append' or 'overwrite', not {mode!r}")
    rows = int(max_rows_per_file or DEFAULT_MAX_ROWS_PER_FILE)
    size = int(max_bytes_per_file or DEFAULT_MAX_BYTES_PER_FILE)
    if rows < 1 or size < 1:
        raise ValueError("max_rows_per_file and max_bytes_per_file must be positive")
    store, root = resolve_target(dataset_uri, storage_options)
    arrow_schema, batches = coerce_input(data, schema, device=True)
    if len(arrow_schema) == 0:
        raise EmptyWriteError("Cannot write with an empty schema (the data has no columns)")
    base, lance_schema, write_schema, order, minor = _target(store, root, mode, arrow_schema, data_storage_version,
                                                             version_wins)
    pbs, _written = _write_fragments(store, root, lance_schema, write_schema, batches, order, minor, rows, size,
                                     fragment_events(progress, fragment_id, begin_with_file),
                                     int(rows_per_group or DEFAULT_ROWS_PER_BATCH))
    return base, lance_schema, [FragmentMetadata.from_pb(f) for f in pbs], minor


def create_fragment(
    dataset_uri: str | os.PathLike[str] | Any,
    data: object,
    fragment_id: int | None = None,
    schema: pa.Schema | None = None,
    max_rows_per_group: int | None = 1024,
    progress: Any = None,
    mode: str = "append",
    *,
    data_storage_version: str | None = None,
    use_legacy_format: bool | None = None,
    storage_options: dict[str, str] | None = None,
) -> FragmentMetadata:
    """One fragment (one data file) of ``data`` for the dataset at ``dataset_uri``, not
    committed (pylance's ``LanceFragment.create``); ``fragment_id`` defaults to 0.
    ``progress`` (:class:`lance_gpu.progress.FragmentWriteProgress`) is told ``begin`` and
    ``complete`` of the fragment, with id ``fragment_id``.  ``data_storage_version`` (or
    ``use_legacy_format``), when given, is written even where the dataset has another (as
    pylance's); else the dataset's version; ``max_rows_per_group`` sizes legacy batches."""
    if use_legacy_format is not None and data_storage_version is None:
        data_storage_version = "legacy" if use_legacy_format else "stable"
    _base, _schema, frags, _minor = _write_uncommitted(
        data, dataset_uri, schema, mode, 1 << 62, 1 << 62, progress,
        int(fragment_id or 0), data_storage_version, storage_options, begin_with_file=True,
        rows_per_group=max_rows_per_group, version_wins=True,
    )
    if len(frags) != 1:
        raise EmptyWriteError("LanceFragment.create: the input data was empty (no rows to write)")
    frag = frags[0]
    frag.id = int(fragment_id or 0)
    return frag


def discard_fragments(
    uri: str | os.PathLike[str] | Any,
    fragments: Iterable[FragmentMetadata | table_pb2.DataFragment],
    storage_options: dict[str, str] | None = None,
) -> None:
    """Delete the data files of fragments that were written but will not be committed."""
    store, root = resolve_target(uri, storage_options)
    remove_quietly(store, [join(root, "data", f.path) for frag in fragments for f in frag.files])
