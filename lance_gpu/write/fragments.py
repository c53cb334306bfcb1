# SPDX-License-Identifier: Apache-2.0
"""Distributed writes: write fragments anywhere, commit them once.

pylance's pattern (``lance.fragment.write_fragments`` + ``LanceDataset.commit``), for
writers such as the Spark sink whose tasks each write data files and whose driver commits::

    base = lance_gpu.dataset(uri).version                       # driver: the version read
    frags = write_fragments(batches, uri, schema=schema)        # each task
    ds = commit_fragments(uri, all_frags, "append", read_version=base)   # driver

:func:`write_fragments` writes data files under ``{uri}/data`` and returns their
``DataFragment`` protobufs (no ids yet: ids are handed out at commit).  Nothing is visible
until :func:`commit_fragments` publishes a version; :func:`discard_fragments` deletes the
files of fragments that will never be committed.  A commit conflicts like ``write_dataset``
does: an append is rebuilt on a concurrent append, delete, update or compaction (fresh
fragment ids on top of the winner); an overwrite or restore (or anything
:mod:`lance_gpu.write.commit` does not rebase on) raises
:class:`~lance_gpu.errors.CommitConflictError`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import pyarrow as pa

from lance_gpu._proto import table_pb2
from lance_gpu.io import ObjectStore, join, resolve
from lance_gpu.table.manifest import read_manifest_file, resolve_manifest
from lance_gpu.table.schema import LanceSchema

__all__ = ["commit_fragments", "discard_fragments", "write_fragments"]


def _target(store: ObjectStore, root: str, mode: str, arrow_schema: pa.Schema, data_storage_version: str | None):
    """(base manifest or None, Lance schema, Arrow schema to write, column order, minor)."""
    from lance_gpu.table.features import check_writer_flags
    from lance_gpu.write.commit import SUPPORTED_WRITER_FLAGS, check_appendable, latest
    from lance_gpu.write.dataset_writer import _append_plan, _check_types, _minor_of, _strip

    base, _naming = latest(store, root)
    if mode == "append" and base is not None:
        check_appendable(base)
        schema = LanceSchema.from_manifest(base.manifest, base.path)
        target = schema.to_arrow(physical=True)
        order: list[int] | None = _append_plan(target, arrow_schema)
        if order == list(range(len(order))) and all(_strip(g.type).equals(f.type) for f, g in zip(target, arrow_schema)):
            order = None
        minor = int(base.manifest.data_format.version.split(".")[1])
        return base, schema, (target if order is not None else arrow_schema), order, minor
    if base is not None:
        check_writer_flags(base.manifest.writer_feature_flags, base.path, SUPPORTED_WRITER_FLAGS)
    minor = _minor_of(data_storage_version)
    schema = LanceSchema.from_arrow(arrow_schema)
    _check_types(schema, minor)
    return base, schema, arrow_schema, None, minor


def write_fragments(
    data: object,
    uri: str | os.PathLike[str],
    schema: pa.Schema | None = None,
    *,
    mode: str = "append",
    data_storage_version: str | None = None,
    max_rows_per_file: int | None = None,
    max_bytes_per_file: int | None = None,
    storage_options: dict[str, str] | None = None,
) -> list[table_pb2.DataFragment]:
    """Write ``data`` as new data files of the dataset at ``uri``; returns their fragments.

    ``data``: anything :func:`lance_gpu.write_dataset` takes (Table, RecordBatch, reader,
    iterable of batches, pandas DataFrame), streamed.  ``mode="append"`` (default) writes
    with the existing dataset's schema, field ids and file version (the data's columns may
    come in any order; types must match, else :class:`SchemaMismatchError` before anything
    is written); ``"create"`` / ``"overwrite"`` (or a dataset that does not exist yet) use the
    data's schema and ``data_storage_version`` (``"2.1"`` / ``"2.2"``, default 2.2).

    Each file of at most ``max_rows_per_file`` rows (default 1 Mi) is one fragment.  The
    fragments carry no ids and nothing is committed: pass them to :func:`commit_fragments`
    (with the same ``mode``, and ``schema`` for overwrites), or to :func:`discard_fragments`.
    """
    from lance_gpu.write.dataset_writer import (
        DEFAULT_MAX_BYTES_PER_FILE,
        DEFAULT_MAX_ROWS_PER_FILE,
        _as_batches,
        _write_fragments,
    )

    if mode not in ("create", "append", "overwrite"):
        raise ValueError(f"mode must be 'create', 'append' or 'overwrite', not {mode!r}")
    rows = int(max_rows_per_file or DEFAULT_MAX_ROWS_PER_FILE)
    size = int(max_bytes_per_file or DEFAULT_MAX_BYTES_PER_FILE)
    if rows < 1 or size < 1:
        raise ValueError("max_rows_per_file and max_bytes_per_file must be positive")
    store, root = resolve(uri, storage_options)
    arrow_schema, batches = _as_batches(data, schema)
    _base, lance_schema, write_schema, order, minor = _target(store, root, mode, arrow_schema, data_storage_version)
    fragments, _written = _write_fragments(store, root, lance_schema, write_schema, batches, order, minor, rows, size)
    return fragments


def discard_fragments(
    uri: str | os.PathLike[str],
    fragments: Iterable[table_pb2.DataFragment],
    storage_options: dict[str, str] | None = None,
) -> None:
    """Delete the data files of fragments that were written but will not be committed."""
    from lance_gpu.write.dataset_writer import remove_quietly

    store, root = resolve(uri, storage_options)
    remove_quietly(store, [join(root, "data", f.path) for frag in fragments for f in frag.files])


def commit_fragments(
    uri: str | os.PathLike[str],
    fragments: Sequence[table_pb2.DataFragment],
    mode: str = "append",
    read_version: int | None = None,
    *,
    schema: pa.Schema | None = None,
    storage_options: dict[str, str] | None = None,
):
    """Commit fragments from :func:`write_fragments` as one new version; returns the
    :class:`~lance_gpu.dataset.LanceDataset` at that version.

    ``mode="append"`` adds them to the version ``read_version`` (default: the latest) --
    if other writers committed since, the append is rebuilt on top of concurrent appends and
    refused (:class:`CommitConflictError`) after anything else.  ``"overwrite"`` /
    ``"create"`` make them the whole dataset, with ``schema`` (the Arrow schema given to
    :func:`write_fragments`; its field ids are re-derived the same way).  ``fragments``
    may also be serialized ``DataFragment`` bytes.
    """
    from lance_gpu.dataset import LanceDataset
    from lance_gpu.errors import DatasetExistsError, DatasetNotFoundError
    from lance_gpu.table.manifest import list_versions
    from lance_gpu.write.commit import PendingCommit, commit

    if mode not in ("create", "append", "overwrite"):
        raise ValueError(f"mode must be 'create', 'append' or 'overwrite', not {mode!r}")
    store, root = resolve(uri, storage_options)
    frags = [table_pb2.DataFragment.FromString(f) if isinstance(f, (bytes, bytearray)) else f for f in fragments]
    try:
        versions = list_versions(store, root)
    except DatasetNotFoundError:
        versions = []
    if mode == "create" and versions:
        raise DatasetExistsError(f"dataset {store.uri(root)} already exists (use mode='append' or 'overwrite')")
    naming = versions[-1].naming if versions else "V2"
    if versions:
        info = resolve_manifest(store, root, read_version) if read_version is not None else versions[-1]
        base = read_manifest_file(store, info.path)
    else:
        base = None
    if mode == "append" and base is not None:
        op = PendingCommit("append", frags)
    else:
        if schema is None:
            raise ValueError(f"commit_fragments: mode={mode!r} needs the Arrow schema the fragments were written with")
        minors = {int(f.file_minor_version) for frag in frags for f in frag.files}
        minor = minors.pop() if len(minors) == 1 else 2
        op = PendingCommit("overwrite", frags, schema=LanceSchema.from_arrow(schema), data_format=f"2.{minor}")
    manifest = commit(store, root, op, base, naming)
    return LanceDataset(root, int(manifest.version), storage_options=storage_options, store=store)
