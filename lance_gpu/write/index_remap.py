# SPDX-License-Identifier: Apache-2.0
"""Indices across a compaction: what pylance 14 does to them, for the index types we can.

A compaction moves the live rows of the fragments it rewrites to new fragments; their row
*addresses* (``fragment_id << 32 | row offset``) change, deleted rows disappear.

pylance 14 remaps every index covering a rewritten fragment into a new index directory
``_indices/<new uuid>/`` -- with stable row ids too: its btrees hold row addresses either
way (upstream lance skips the remap for stable row ids; pylance 14 does not, and a btree
left alone answers with the old addresses).  The Rewrite transaction lists each in
``rewritten_indices`` (old uuid, new uuid, details, version) and the manifest's index entry
gets the new uuid and files, and a fragment bitmap that drops the old fragments of every
rewrite group it covered and gains their new ones (``recalculate_fragment_bitmap``; a group
is wholly covered by an index or not at all, :func:`~lance_gpu.write.compaction.plan_compaction`
sees to that); name, fields, ``dataset_version``, ``index_version`` and ``created_at`` stay.
The old directory stays (older versions use it).

BTree, Bitmap and LabelList indices are remapped here (file layouts:
:mod:`lance_gpu.index.scalar`).  pylance's remap keeps the order, maps the addresses of moved
rows, drops deleted rows; a btree is paged again (``batch_size`` rows per page, a new
lookup), a bitmap index keeps its keys with remapped row sets (a LabelList also its null-list
set, global buffer 1).  We do the same.  Other index types (inverted, vector ...) and
range-partitioned btrees are refused with :class:`~lance_gpu.errors.UnsupportedFeatureError`
before anything is written.
"""

from __future__ import annotations

import uuid as _uuid

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError, UnsupportedFeatureError
from lance_gpu.index.files import IndexFile, read_index_table
from lance_gpu.index.metadata import BITMAP_DETAILS, BTREE_DETAILS, LABEL_LIST_DETAILS, VECTOR_DETAILS, index_dir
from lance_gpu.index.rowset import FULL, deserialize_rowset, rowset_from_addresses, serialize_rowset
from lance_gpu.index.scalar import BITMAP_LOOKUP, BTREE_LOOKUP, BTREE_PAGES
from lance_gpu.io.store import ObjectStore, join
from lance_gpu.table.indices import fragment_bitmap
from lance_gpu.table.schema import LanceSchema
from lance_gpu.write.file_writer import LanceFileWriter
from lance_gpu.write.row_address_map import RowAddressMap
from lance_gpu.write.vector_index_remap import check_vector_remappable, remap_ivf

__all__ = [
    "BTREE_DETAILS",
    "RowAddressMap",
    "check_remappable",
    "remap_bitmap",
    "remap_btree",
    "remap_index",
]

#: pylance's fragment-reuse system index (deferred remapping); we never write one.
FRAG_REUSE_INDEX = "__lance_frag_reuse"


def check_remappable(index: table_pb2.IndexMetadata, root: str) -> None:
    """Raise :class:`UnsupportedFeatureError` unless :func:`remap_btree` can remap ``index``."""
    what = f"{root}: compaction would have to remap index {index.name!r}"
    if index.name == FRAG_REUSE_INDEX:
        raise UnsupportedFeatureError(f"{what} (a fragment-reuse index: deferred remapping is not supported)")
    url = index.index_details.type_url
    if url not in _REMAPPABLE:
        kind = url.rsplit(".", 1)[-1] or "unknown type"
        raise UnsupportedFeatureError(f"{what} ({kind}); only BTree, Bitmap, LabelList and IVF indices are remapped")
    if index.HasField("base_id"):
        raise UnsupportedFeatureError(f"{what}, which lives in another base path")
    names = {f.path for f in index.files}
    if url == VECTOR_DETAILS:
        check_vector_remappable(index, what)
    if url == BTREE_DETAILS and names and names != {BTREE_PAGES, BTREE_LOOKUP}:
        raise UnsupportedFeatureError(f"{what}, a btree of files {sorted(names)} (range-partitioned)")
    if fragment_bitmap(index) is None:
        raise UnsupportedFeatureError(f"{what}, which records no fragment bitmap")


def _write_file(store: ObjectStore, key: str, table: pa.Table, schema: LanceSchema, minor: int) -> int:

    writer = LanceFileWriter(key, schema, minor if minor in (0, 1, 2) else 2, store=store)
    try:
        if table.num_rows:
            writer.write(table.combine_chunks())
        return writer.finish()
    except BaseException:
        writer.abort()
        raise


def remap_btree(
    store: ObjectStore, root: str, index: table_pb2.IndexMetadata, mapping: RowAddressMap, written: list[str]
) -> tuple[bytes, list[table_pb2.IndexFile]]:
    """Write the remapped copy of btree ``index`` (see the module docstring) into a new
    ``_indices/<uuid>/``; returns (the new uuid's 16 bytes, its files).  Every key written
    is appended to ``written`` before it is written."""
    src_key = index_dir(root, index)
    src = store.uri(src_key)
    pages, pages_schema, minor = read_index_table(store, join(src_key, BTREE_PAGES))
    lookup, lookup_schema, lookup_minor = read_index_table(store, join(src_key, BTREE_LOOKUP))
    meta = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in lookup_schema.metadata.items()}
    if meta.get("range_partitioned", "false").lower() != "false":
        raise UnsupportedFeatureError(f"{src}: range-partitioned btree indices are not remapped")
    try:
        batch_size = int(meta["batch_size"])
    except (KeyError, ValueError):
        raise CorruptFileError(f"{src}/{BTREE_LOOKUP}", "btree lookup without a batch_size") from None
    if pages.column_names != ["values", "ids"] or lookup.column_names != ["min", "max", "null_count", "page_idx"]:
        raise CorruptFileError(src, "unexpected btree index file columns")
    ids = pages.column("ids").to_numpy()
    new_ids, keep = mapping.apply(ids)
    values = pages.column("values").combine_chunks()
    if not keep.all():
        values = values.filter(pa.array(keep))
        new_ids = new_ids[keep]
    remapped = pa.Table.from_arrays([values, pa.array(new_ids, pa.uint64())], schema=pages.schema)

    n = remapped.num_rows
    starts = list(range(0, n, batch_size))
    mins = [values[s] for s in starts]
    maxs = [values[min(s + batch_size, n) - 1] for s in starts]
    nulls = [values.slice(s, batch_size).null_count for s in starts]
    vtype = lookup.schema.field("min").type
    new_lookup = pa.Table.from_arrays(
        [
            pa.array([m.as_py() for m in mins], vtype),
            pa.array([m.as_py() for m in maxs], vtype),
            pa.array(nulls, pa.uint32()),
            pa.array(range(len(starts)), pa.uint32()),
        ],
        schema=lookup.schema,
    )

    new_uuid = _uuid.uuid4()
    dest = join(root, "_indices", str(new_uuid))
    files = []
    for name, table, schema, fminor in (
        (BTREE_PAGES, remapped, pages_schema, minor),
        (BTREE_LOOKUP, new_lookup, lookup_schema, lookup_minor),
    ):
        path = join(dest, name)
        written.append(path)
        size = _write_file(store, path, table, schema, fminor)
        files.append(table_pb2.IndexFile(path=name, size_bytes=size))
    return new_uuid.bytes, files


def _addresses(rows: dict[int, BitMap | None], mapping: RowAddressMap) -> np.ndarray:
    """The row addresses of a row set (a whole fragment expanded from the mapping's rows of
    it; a whole fragment the compaction did not rewrite cannot be expanded and is kept)."""
    parts = []
    for frag, bitmap in rows.items():
        base = np.uint64(frag) << np.uint64(32)
        if bitmap is FULL:
            lo = np.searchsorted(mapping.old, base)
            hi = np.searchsorted(mapping.old, base + np.uint64(1 << 32))
            parts.append(mapping.old[lo:hi])
        else:
            parts.append(base + np.frombuffer(bitmap.to_array(), np.uint32).astype(np.uint64))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def _remap_rowset(data: bytes, mapping: RowAddressMap, path: str) -> bytes:
    rows = deserialize_rowset(data, path)
    rewritten = {int(x) for x in np.unique(mapping.old >> np.uint64(32))}
    kept = {f: b for f, b in rows.items() if b is FULL and f not in rewritten}
    moved = {f: b for f, b in rows.items() if f not in kept}
    new, keep = mapping.apply(_addresses(moved, mapping))
    out = rowset_from_addresses(np.sort(new[keep]))
    out.update(kept)
    return serialize_rowset(out)


def remap_bitmap(
    store: ObjectStore, root: str, index: table_pb2.IndexMetadata, mapping: RowAddressMap, written: list[str]
) -> tuple[bytes, list[table_pb2.IndexFile]]:
    """Write the remapped copy of bitmap / label-list ``index`` into a new
    ``_indices/<uuid>/``: the same keys, each row set remapped (and a LabelList's null-list
    set, global buffer 1); returns (the new uuid's 16 bytes, its files)."""
    src = IndexFile(store, join(index_dir(root, index), BITMAP_LOOKUP))
    try:
        keys = src.read("keys")
        bitmaps = src.read("bitmaps")
        extra = []
        nulls_at = src.metadata.get("lance:label_list_nulls")
        if nulls_at is not None:
            extra.append(_remap_rowset(src.global_buffer(int(nulls_at)), mapping, src.path))
        schema = src.lance_schema
        minor = src.minor
    finally:
        src.close()
    remapped = pa.array([_remap_rowset(b.as_py(), mapping, src.path) for b in bitmaps], pa.binary())
    table = pa.Table.from_arrays([keys, remapped], schema=schema.to_arrow())
    new_uuid = _uuid.uuid4()
    path = join(root, "_indices", str(new_uuid), BITMAP_LOOKUP)
    written.append(path)

    writer = LanceFileWriter(path, schema, minor if minor in (0, 1, 2) else 2, store=store)
    try:
        for data in extra:
            writer.add_global_buffer(data)
        if table.num_rows:
            writer.write(table.combine_chunks())
        size = writer.finish()
    except BaseException:
        writer.abort()
        raise
    return new_uuid.bytes, [table_pb2.IndexFile(path=BITMAP_LOOKUP, size_bytes=size)]


_REMAPPABLE = {BTREE_DETAILS: remap_btree, BITMAP_DETAILS: remap_bitmap, LABEL_LIST_DETAILS: remap_bitmap,
               VECTOR_DETAILS: remap_ivf}


def remap_index(
    store: ObjectStore, root: str, index: table_pb2.IndexMetadata, mapping: RowAddressMap, written: list[str]
) -> tuple[bytes, list[table_pb2.IndexFile]]:
    """Remap any index :func:`check_remappable` accepts."""
    return _REMAPPABLE[index.index_details.type_url](store, root, index, mapping, written)
