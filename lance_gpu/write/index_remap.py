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

Only **BTree** scalar indices (``/lance.table.BTreeIndexDetails``) are remapped here.  Their
files, as pylance 14 writes them (Lance 2.2 files):

* ``page_data.lance``: ``values: <column type>``, ``ids: uint64 not null`` -- every indexed
  row's value and row address, sorted by value, read in pages of ``batch_size`` rows;
* ``page_lookup.lance``: per page ``min`` (its first value), ``max`` (its last value),
  ``null_count: uint32``, ``page_idx: uint32``; schema metadata ``batch_size`` and
  ``range_partitioned`` = ``false``.

pylance's remap keeps the order, maps the addresses of moved rows, drops deleted rows and
pages the result again (``batch_size`` rows per page, a new lookup).  We do the same.  Other
index types (bitmap, inverted, vector ...) and range-partitioned btrees are refused with
:class:`~lance_gpu.errors.UnsupportedFeatureError` before anything is written.
"""

from __future__ import annotations

import uuid as _uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError, UnsupportedFeatureError
from lance_gpu.file.container import FileVersion, LanceFileReader
from lance_gpu.io.store import ObjectStore, join
from lance_gpu.table.indices import fragment_bitmap
from lance_gpu.table.schema import LanceSchema

__all__ = [
    "BTREE_DETAILS",
    "RowAddressMap",
    "remap_btree",
    "check_remappable",
]

BTREE_DETAILS = "/lance.table.BTreeIndexDetails"
BTREE_PAGES = "page_data.lance"
BTREE_LOOKUP = "page_lookup.lance"
#: pylance's fragment-reuse system index (deferred remapping); we never write one.
FRAG_REUSE_INDEX = "__lance_frag_reuse"
_DELETED = np.uint64(np.iinfo(np.uint64).max)


@dataclass
class RowAddressMap:
    """Old row address -> new row address of every physical row of the rewritten fragments
    (``new`` is ``2**64 - 1`` for a deleted row).  ``old`` is sorted."""

    old: np.ndarray  # uint64
    new: np.ndarray  # uint64

    @classmethod
    def build(
        cls,
        groups: Iterable[tuple[Sequence[tuple[int, int, np.ndarray | None]], Sequence[table_pb2.DataFragment]]],
    ) -> RowAddressMap:
        """``groups``: per rewrite group, its old fragments as ``(id, physical rows, live
        row offsets or None for all)`` in the order their rows were written, and the new
        fragments (ids assigned) that hold those live rows in that order."""
        olds, news = [], []
        for old_frags, new_frags in groups:
            sizes = np.array([int(f.physical_rows) for f in new_frags], np.int64)
            starts = np.concatenate([[0], np.cumsum(sizes)])
            new_ids = np.array([int(f.id) for f in new_frags], np.uint64)
            pos = 0
            for frag_id, physical, live in old_frags:
                keys = (np.uint64(frag_id) << np.uint64(32)) + np.arange(physical, dtype=np.uint64)
                vals = np.full(physical, _DELETED, np.uint64)
                rows = np.arange(physical, dtype=np.int64) if live is None else np.asarray(live, np.int64)
                p = pos + np.arange(rows.size, dtype=np.int64)
                k = np.searchsorted(starts, p, side="right") - 1
                if rows.size and (k.min() < 0 or k.max() >= sizes.size):
                    raise AssertionError("compaction wrote fewer rows than its fragments hold")
                vals[rows] = (new_ids[k] << np.uint64(32)) + (p - starts[k]).astype(np.uint64)
                pos += rows.size
                olds.append(keys)
                news.append(vals)
            if pos != int(starts[-1]):
                raise AssertionError(f"compaction wrote {int(starts[-1])} rows for {pos} live rows")
        old = np.concatenate(olds) if olds else np.zeros(0, np.uint64)
        new = np.concatenate(news) if news else np.zeros(0, np.uint64)
        order = np.argsort(old, kind="stable")
        return cls(old[order], new[order])

    def apply(self, addrs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(new addresses, keep mask): rows of other fragments keep their address, deleted
        rows of rewritten fragments are dropped."""
        addrs = np.asarray(addrs, np.uint64)
        if self.old.size == 0:
            return addrs, np.ones(addrs.size, np.bool_)
        i = np.minimum(np.searchsorted(self.old, addrs), self.old.size - 1)
        hit = self.old[i] == addrs
        out = np.where(hit, self.new[i], addrs)
        return out, ~(hit & (out == _DELETED))


def _index_dir(root: str, index: table_pb2.IndexMetadata) -> str:
    return join(root, "_indices", str(_uuid.UUID(bytes=bytes(index.uuid.uuid))))


def check_remappable(index: table_pb2.IndexMetadata, root: str) -> None:
    """Raise :class:`UnsupportedFeatureError` unless :func:`remap_btree` can remap ``index``."""
    what = f"{root}: compaction would have to remap index {index.name!r}"
    if index.name == FRAG_REUSE_INDEX:
        raise UnsupportedFeatureError(f"{what} (a fragment-reuse index: deferred remapping is not supported)")
    if index.index_details.type_url != BTREE_DETAILS:
        kind = index.index_details.type_url.rsplit(".", 1)[-1] or "unknown type"
        raise UnsupportedFeatureError(f"{what} ({kind}); only BTree indices are remapped")
    if index.HasField("base_id"):
        raise UnsupportedFeatureError(f"{what}, which lives in another base path")
    names = {f.path for f in index.files}
    if names and names != {BTREE_PAGES, BTREE_LOOKUP}:
        raise UnsupportedFeatureError(f"{what}, a btree of files {sorted(names)} (range-partitioned)")
    if fragment_bitmap(index) is None:
        raise UnsupportedFeatureError(f"{what}, which records no fragment bitmap")


def _read_file(store: ObjectStore, key: str) -> tuple[pa.Table, LanceSchema, int]:
    """A whole standalone Lance file of top-level leaf columns: (table, schema, minor)."""
    reader = LanceFileReader(key, store)
    path = reader.path
    try:
        fd = reader.descriptor
        schema = LanceSchema.from_protos(fd.schema.fields, dict(fd.schema.metadata), path)
        arrow = schema.to_arrow()
        if any(not f.is_leaf for f in schema.fields):
            raise CorruptFileError(path, "btree index file with nested columns")
        if reader.version == FileVersion(2, 0):
            from lance_gpu.file.v2_0 import read_field as read_v20

            cols = [read_v20(reader, f, [i], None) for i, f in enumerate(arrow)]
        else:
            from lance_gpu.file.reader import read_field

            cols = [read_field(reader, f, [i]) for i, f in enumerate(arrow)]
        minor = reader.version.minor
    finally:
        reader.close()
    return pa.Table.from_arrays([pa.chunked_array([c]) if isinstance(c, pa.Array) else c for c in cols], schema=arrow), schema, minor


def _write_file(store: ObjectStore, key: str, table: pa.Table, schema: LanceSchema, minor: int) -> int:
    from lance_gpu.write.file_writer import LanceFileWriter

    writer = LanceFileWriter(key, schema, minor if minor in (1, 2) else 2, store=store)
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
    src_key = _index_dir(root, index)
    src = store.uri(src_key)
    pages, pages_schema, minor = _read_file(store, join(src_key, BTREE_PAGES))
    lookup, lookup_schema, lookup_minor = _read_file(store, join(src_key, BTREE_LOOKUP))
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
