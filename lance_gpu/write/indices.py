# SPDX-License-Identifier: Apache-2.0
"""Building scalar indices and committing index changes, as pylance 14 does.

``create_scalar_index(column, "BTREE" | "BITMAP" | "LABEL_LIST", name=, replace=)`` reads the
column's live values with their row addresses from every fragment of the version, writes
the index files of :mod:`lance_gpu.index.scalar` into a new ``_indices/<uuid>/`` (Lance files
of the dataset's file version, as pylance) and commits a ``CreateIndex`` transaction (:class:`lance_gpu.txn.operations.CreateIndex`)
whose ``new_indices`` holds the new entry and whose ``removed_indices`` the entries it
replaces.  The entry: ``fields`` = [the column's field id], ``dataset_version`` = the version
read, ``fragment_bitmap`` = the fragments read, ``index_version`` 0 (BTree, Bitmap) or 1
(LabelList; BTree on a dataset with stable row ids, whose btrees hold row addresses while
bitmaps hold the stable row ids), ``created_at`` in ms, ``files`` with their sizes.

A concurrent writer that rewrote rows (compaction, update, merge) while the index was built
makes the commit retryable: the index is built again on the latest version, at most
``DEFAULT_CONFLICT_RETRIES`` times; a concurrent append or delete is committed over.

``drop_index(name)`` commits a ``CreateIndex`` that removes every entry of that name.
``optimize_indices()`` brings every BTree / Bitmap / LabelList index up to date with the
fragments appended or rewritten since it was built: its entries are replaced by one new
entry over all fragments of the version (new uuid; name, fields, ``dataset_version`` and
``index_version`` kept), all in one ``CreateIndex``, as pylance's default merge does; with
``num_indices_to_merge=0`` a new segment (an entry of the same name) covers only the
unindexed fragments and the old segments stay.

Refusals (pylance's exception classes): an unknown index type ``NotImplementedError``; a
column not in the schema ``KeyError``; a column of the wrong type ``TypeError``; an existing
name without ``replace``, or over other fields, ``RuntimeError``; ``fragment_ids`` (pylance's
distributed indexing goes through ``create_index_uncommitted``) ``ValueError``.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid as _uuid
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lance_gpu._proto import table_pb2
from lance_gpu.errors import (
    ArgumentTypeError,
    FieldNotFoundError,
    IndexExistsError,
    IndexNotFoundError,
    InvalidArgumentError,
    UnsupportedFeatureError,
)
from lance_gpu.index.metadata import (
    BITMAP_DETAILS,
    BTREE_DETAILS,
    LABEL_LIST_DETAILS,
    fragment_bitmap,
)
from lance_gpu.index.rowset import rowset_from_addresses, serialize_rowset
from lance_gpu.index.scalar import BITMAP_LOOKUP, BTREE_LOOKUP, BTREE_PAGES
from lance_gpu.io.store import ObjectStore, join
from lance_gpu.scan import scanner_for
from lance_gpu.table import features
from lance_gpu.table.schema import LanceSchema
from lance_gpu.txn.commit import DEFAULT_CONFLICT_RETRIES, commit, run_with_retries
from lance_gpu.txn.operations import CreateIndex
from lance_gpu.write.file_writer import LanceFileWriter

if TYPE_CHECKING:  # pragma: no cover
    from lance_gpu.table.snapshot import TableSnapshot

__all__ = ["create_scalar_index", "drop_index", "optimize_indices", "write_bitmap", "write_btree"]

#: Rows per BTree page (pylance's default).
BTREE_BATCH_SIZE = 4096
#: Index types pylance 14 knows for scalar columns (the ones we build first).
_PYLANCE_TYPES = ("BTREE", "BITMAP", "NGRAM", "ZONEMAP", "LABEL_LIST", "INVERTED", "BLOOMFILTER", "RTREE",
                  "MINHASHLSH", "FTS")
_BUILT = {"BTREE": (BTREE_DETAILS, 0), "BITMAP": (BITMAP_DETAILS, 0), "LABEL_LIST": (LABEL_LIST_DETAILS, 1)}
_KIND_OF_DETAILS = {details: kind for kind, (details, _v) in _BUILT.items()}


def _check_type(index_type: Any) -> str:
    if not isinstance(index_type, str):
        raise UnsupportedFeatureError(f"index type {index_type!r}: only 'BTREE', 'BITMAP' and 'LABEL_LIST' are supported")
    kind = index_type.upper()
    if kind not in _PYLANCE_TYPES:
        raise UnsupportedFeatureError(
            'Only "BTREE", "BITMAP", "NGRAM", "ZONEMAP", "LABEL_LIST", "INVERTED", "BLOOMFILTER", "RTREE" or '
            f'"MINHASHLSH" are supported for scalar columns.  Received {index_type}')
    if kind not in _BUILT:
        raise UnsupportedFeatureError(f"index type {kind} is not supported by lance_gpu (BTREE, BITMAP, LABEL_LIST are)")
    return kind


def _scalar_ok(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_string(t)
        or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
        or pa.types.is_decimal(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_temporal(t)
    )


def _check_column(ds: TableSnapshot, column: str, kind: str) -> tuple[int, pa.DataType]:
    top = {f.name: f for f in ds.lance_schema.fields}
    if column not in top:
        try:
            ds.lance_schema.field(column)
        except Exception:  # noqa: BLE001 - any lookup failure: the column is not there
            raise FieldNotFoundError(f"{column} not found in schema") from None
        raise UnsupportedFeatureError(f"create_scalar_index: {column!r} is a nested field; only top-level columns are indexed")
    t = ds.schema.field(column).type
    if kind == "LABEL_LIST":
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not _scalar_ok(t.value_type):
            raise ArgumentTypeError(f"LABEL_LIST index column {column} must be a list or large list")
    elif not _scalar_ok(t):
        raise ArgumentTypeError(
            f"BTREE/BITMAP index column {column} must be int, float, bool, str, large_str, binary, "
            "large_binary, decimal, fixed-size-binary, or temporal")
    return int(top[column].id), t


# --------------------------------------------------------------------------------------------
# sorting values as lance does


def _group_keys(values: pa.Array) -> list[np.ndarray]:
    """Sort keys (least significant first, as ``np.lexsort`` takes them) ordering the values
    as lance orders them and equal exactly where they are one index key: nulls first, then
    ascending -- integers and temporals as themselves, floats by their bits in IEEE total
    order (``-0.0`` before ``0.0``, NaN last), other types by their rank in a sorted
    dictionary of the distinct values."""
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), np.bool_)
    t = values.type
    if pa.types.is_floating(t):
        v = np.asarray(pc.fill_null(values, 0).to_numpy(zero_copy_only=False), np.float64)
        bits = np.where(np.isnan(v), np.float64("nan"), v).view(np.int64)
        # total order on IEEE bits: flip the magnitude of negatives
        return [np.where(bits < 0, np.int64(-(2**63)) - bits - 1, bits), valid]
    if pa.types.is_integer(t) or pa.types.is_temporal(t):
        # temporals as their storage integers (dates, times, timestamps, durations)
        ints = values.view(pa.int32() if t.bit_width == 32 else pa.int64()) if pa.types.is_temporal(t) else values
        v = np.asarray(pc.fill_null(ints, 0).to_numpy(zero_copy_only=False))
        return [v, valid]
    enc = pc.dictionary_encode(values)
    dictionary = enc.dictionary
    rank = np.empty(len(dictionary), np.int64)
    rank[np.asarray(pc.sort_indices(dictionary), np.int64)] = np.arange(len(dictionary), dtype=np.int64)
    idx = np.asarray(pc.fill_null(enc.indices, 0).to_numpy(zero_copy_only=False), np.int64)
    return [np.where(valid, rank[idx] if len(dictionary) else -1, -1).astype(np.int64)]


def _sorted_groups(values: pa.Array, addrs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions of ``values`` in lance's order, ties by row address; start positions of
    each run of one key in that order, plus the end)."""
    keys = _group_keys(values)
    order = np.lexsort((addrs, *keys)).astype(np.int64)
    change = np.zeros(max(order.size - 1, 0), np.bool_)
    for key in keys:
        k = key[order]
        change |= k[1:] != k[:-1]
    bounds = np.concatenate([[0], np.flatnonzero(change) + 1, [order.size]]).astype(np.int64)
    return order, bounds


# --------------------------------------------------------------------------------------------
# writing the files


def _write(store: ObjectStore, key: str, table: pa.Table, written: list[str], global_buffers: tuple[bytes, ...] = (),
           minor: int = 2) -> int:

    written.append(key)
    writer = LanceFileWriter(key, LanceSchema.from_arrow(table.schema), minor, store=store)
    try:
        for data in global_buffers:
            writer.add_global_buffer(data)
        if table.num_rows:
            writer.write(table.combine_chunks())
        return int(writer.finish())
    except BaseException:
        writer.abort()
        raise


def write_btree(store: ObjectStore, directory: str, values: pa.Array, addrs: np.ndarray, written: list[str],
                batch_size: int = BTREE_BATCH_SIZE, minor: int = 2) -> list[table_pb2.IndexFile]:
    """Write ``page_data.lance`` and ``page_lookup.lance`` (layout: :mod:`lance_gpu.index.scalar`)
    as Lance 2.``minor`` files."""
    order, _bounds = _sorted_groups(values, addrs)
    v = values.take(pa.array(order)) if len(values) else values
    ids = addrs[order].astype(np.uint64)
    pages = pa.Table.from_arrays(
        [v, pa.array(ids, pa.uint64())],
        schema=pa.schema([pa.field("values", values.type), pa.field("ids", pa.uint64(), nullable=False)]),
    )
    n = len(v)
    starts = list(range(0, n, batch_size))
    firsts = pa.array(np.asarray(starts, np.int64))
    lasts = pa.array(np.asarray([min(s + batch_size, n) - 1 for s in starts], np.int64))
    nulls = [v.slice(s, batch_size).null_count for s in starts]
    lookup = pa.Table.from_arrays(
        [v.take(firsts) if starts else pa.array([], values.type), v.take(lasts) if starts else pa.array([], values.type),
         pa.array(nulls, pa.uint32()), pa.array(range(len(starts)), pa.uint32())],
        schema=pa.schema(
            [pa.field("min", values.type), pa.field("max", values.type), pa.field("null_count", pa.uint32(), nullable=False),
             pa.field("page_idx", pa.uint32(), nullable=False)],
            metadata={"batch_size": str(batch_size), "range_partitioned": "false"},
        ),
    )
    files = []
    for name, table in ((BTREE_PAGES, pages), (BTREE_LOOKUP, lookup)):
        size = _write(store, join(directory, name), table, written, minor=minor)
        files.append(table_pb2.IndexFile(path=name, size_bytes=size))
    return files


def write_bitmap(store: ObjectStore, directory: str, values: pa.Array, addrs: np.ndarray, written: list[str],
                 null_lists: np.ndarray | None = None, minor: int = 2) -> list[table_pb2.IndexFile]:
    """Write ``bitmap_page_lookup.lance``: one (key, serialized row set) per distinct value,
    the null key first (layout: :mod:`lance_gpu.index.scalar`).  ``null_lists``: a LabelList
    index's rows whose list is null (its global buffer 1)."""
    order, bounds = _sorted_groups(values, addrs)
    v = values.take(pa.array(order)) if len(values) else values
    a = addrs[order].astype(np.uint64)
    starts = bounds[:-1]
    keys = v.take(pa.array(starts)) if starts.size else pa.array([], values.type)
    bitmaps = [serialize_rowset(rowset_from_addresses(a[lo:hi])) for lo, hi in itertools.pairwise(bounds)]
    meta = {"lance:index_stats": json.dumps({"num_bitmaps": len(bitmaps)}, separators=(",", ":"))}
    extra: tuple[bytes, ...] = ()
    if null_lists is not None:
        meta = {"lance:label_list_nulls": "1", **meta}
        extra = (serialize_rowset(rowset_from_addresses(np.sort(null_lists))),)
    table = pa.Table.from_arrays(
        [keys, pa.array(bitmaps, pa.binary())],
        schema=pa.schema([pa.field("keys", values.type), pa.field("bitmaps", pa.binary())], metadata=meta),
    )
    size = _write(store, join(directory, BITMAP_LOOKUP), table, written, extra, minor)
    return [table_pb2.IndexFile(path=BITMAP_LOOKUP, size_bytes=size)]


# --------------------------------------------------------------------------------------------
# the operations


def _read_column(ds: TableSnapshot, column: str, fragment_ids: set[int] | None, row_ids: bool) -> tuple[pa.Array, np.ndarray, list[int]]:
    """(values, row addresses -- or stable row ids with ``row_ids`` --, fragment ids read) of
    every live row."""
    frags = [f for f in ds.fragments if fragment_ids is None or f.fragment_id in fragment_ids]
    key = "_rowid" if row_ids else "_rowaddr"
    table = scanner_for(ds, columns=[column, key], fragments=frags).to_table()
    values = table.column(column).combine_chunks()
    addrs = np.asarray(table.column(key).to_numpy(), np.uint64)
    return values, addrs, [f.fragment_id for f in frags]


def _labels(values: pa.Array, addrs: np.ndarray) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """A list column as (items, their rows' addresses, addresses of the null lists): every
    item of every list, a null item included (the null key: rows holding a null item)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    flat = pc.list_flatten(values)
    parents = np.asarray(pc.list_parent_indices(values).to_numpy(), np.int64)
    null_lists = np.flatnonzero(~np.asarray(values.is_valid().to_numpy(zero_copy_only=False), np.bool_))
    return flat, addrs[parents], addrs[null_lists]


def _file_minor(ds: TableSnapshot) -> int:
    """The minor of the dataset's 2.x file version (2 when it says nothing else)."""
    text = ds.manifest.data_format.version if ds.manifest.HasField("data_format") else ""
    major, _, minor = text.partition(".")
    return int(minor) if major == "2" and minor in ("0", "1", "2") else 2


def _build(ds: TableSnapshot, kind: str, column: str, field_id: int, name: str, dataset_version: int,
           fragment_ids: set[int] | None, written: list[str], index_uuid: str | None = None) -> table_pb2.IndexMetadata:
    # pylance 14: a btree holds row addresses; bitmap and label-list indices hold row ids
    # (the stable ones where the dataset has them)
    stable = bool(int(ds.manifest.writer_feature_flags) & features.FLAG_STABLE_ROW_IDS)
    values, addrs, frags = _read_column(ds, column, fragment_ids, stable and kind != "BTREE")
    new_uuid = _uuid.UUID(index_uuid) if index_uuid is not None else _uuid.uuid4()
    directory = join(ds.root, "_indices", str(new_uuid))
    # index files in the dataset's file version, as pylance writes them
    minor = _file_minor(ds)
    if kind == "BTREE":
        files = write_btree(ds.store, directory, values, addrs, written, minor=minor)
    elif kind == "BITMAP":
        files = write_bitmap(ds.store, directory, values, addrs, written, minor=minor)
    else:
        items, rows, null_lists = _labels(values, addrs)
        files = write_bitmap(ds.store, directory, items, rows, written, null_lists, minor)
    details, version = _BUILT[kind]
    if kind == "BTREE" and stable:
        version = 1  # pylance 14: a btree of row addresses on a dataset with stable row ids
    meta = table_pb2.IndexMetadata(
        uuid=table_pb2.UUID(uuid=new_uuid.bytes), fields=[field_id], name=name, dataset_version=dataset_version,
        fragment_bitmap=BitMap(frags).serialize(), index_version=version, created_at=int(time.time() * 1000),
        files=files,
    )
    meta.index_details.type_url = details
    return meta


def _entries(ds: TableSnapshot, name: str) -> list[table_pb2.IndexMetadata]:
    section = ds.manifest_file.index_section
    return [] if section is None else [i for i in section.indices if i.name == name]


def _commit(ds: TableSnapshot, op: CreateIndex) -> TableSnapshot:
    manifest = commit(ds.store, ds.root, op, ds.manifest_file, ds.naming)
    return ds.checkout(int(manifest.version))


def create_scalar_index(
    ds: TableSnapshot,
    column: str,
    index_type: Any,
    name: str | None = None,
    *,
    replace: bool = True,
    train: bool = True,
    fragment_ids: list[int] | None = None,
    index_uuid: str | None = None,
    **kwargs: Any,
) -> TableSnapshot:
    """Build a BTree / Bitmap / LabelList index of ``column`` and commit it (see the module
    docstring); returns the committed version's snapshot."""
    kind = _check_type(index_type)
    # (other keyword arguments are index parameters of other types: pylance ignores them too)
    if fragment_ids is not None:
        raise InvalidArgumentError(
            f'{kind} distributed indexing uses create_index_uncommitted(..., index_type="{kind}", fragment_ids=...)')
    if not train:
        raise UnsupportedFeatureError("create_scalar_index: train=False (an empty index) is not supported")
    name = f"{column}_idx" if name is None else name
    first = [True]

    def attempt() -> table_pb2.Manifest:
        # the first attempt builds on ``ds``'s version; after a concurrent rewrite (compaction,
        # update) made the built index stale, the next builds on the latest version
        target = ds if first[0] else ds.latest()
        first[0] = False
        field_id, _t = _check_column(target, column, kind)
        old = _entries(target, name)
        if old:
            if any(list(e.fields) != [field_id] for e in old):
                raise IndexExistsError(f"Index name '{name}' already exists with different fields, please specify a different name")
            if not replace:
                raise IndexExistsError(f"Index name '{name}' already exists, please specify a different name or use replace=True")
        op = CreateIndex([], old)
        try:
            op.new_indices.append(_build(target, kind, column, field_id, name, target.version, None, op.written, index_uuid))
        except BaseException:
            op.cleanup(target.store)
            raise
        return commit(target.store, target.root, op, target.manifest_file, target.naming)

    # a replacement of the indexed column's data is raised, as pylance raises it ("Retryable
    # commit conflict for version N"): the caller decides whether to index the new data
    manifest = run_with_retries(attempt, DEFAULT_CONFLICT_RETRIES,
                                retry_if=lambda error: error.winner_kind != "data_replacement")
    return ds.checkout(int(manifest.version))


def drop_index(ds: TableSnapshot, name: str) -> TableSnapshot:
    """Remove every entry of the index ``name`` (its files stay for older versions); returns
    the committed version's snapshot."""
    old = _entries(ds, name)
    if not old:
        raise IndexNotFoundError(f"Lance index not found: name={name}")
    return _commit(ds, CreateIndex([], old))


def optimize_indices(ds: TableSnapshot, **kwargs: Any) -> TableSnapshot:
    """Add the fragments each BTree / Bitmap / LabelList index does not cover (see the module
    docstring); other index types are left alone.  Returns the committed version's snapshot,
    ``ds`` itself when every index was up to date (nothing is committed then)."""
    index_names = kwargs.pop("index_names", None)
    # 0: a new segment (delta) over the unindexed fragments, the old ones kept; else one
    # entry over every fragment replaces the index's segments
    delta = kwargs.pop("num_indices_to_merge", None) == 0
    section = ds.manifest_file.index_section
    if section is None:
        return ds
    present = {f.fragment_id for f in ds.fragments}
    by_name: dict[str, list[table_pb2.IndexMetadata]] = {}
    for index in section.indices:
        by_name.setdefault(index.name, []).append(index)
    fields = {int(f.id): f.name for f in ds.lance_schema.fields}
    op = CreateIndex([], [])
    try:
        for name, entries in by_name.items():
            if index_names is not None and name not in index_names:
                continue
            first = entries[0]
            kind = _KIND_OF_DETAILS.get(first.index_details.type_url)
            if kind is None or len(first.fields) != 1 or int(first.fields[0]) not in fields:
                continue
            covered: set[int] = set()
            for e in entries:
                covered |= set(fragment_bitmap(e) or ())
            if present <= covered and (delta or len(entries) == 1):
                continue
            # (a merged entry keeps the index's dataset_version, a delta has the version read)
            meta = _build(ds, kind, fields[int(first.fields[0])], int(first.fields[0]), name,
                          ds.version if delta else int(first.dataset_version), present - covered if delta else None,
                          op.written)
            meta.index_version = first.index_version
            op.new_indices.append(meta)
            if not delta:
                op.removed_indices.extend(entries)
    except BaseException:
        op.cleanup(ds.store)
        raise
    return _commit(ds, op) if op.new_indices else ds
