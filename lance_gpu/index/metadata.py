# SPDX-License-Identifier: Apache-2.0
"""The manifest's index section, read as pylance 14 reads it.

Every index of a version is one ``lance.table.IndexMetadata`` in the manifest's
``IndexSection`` (see :mod:`lance_gpu.table.manifest`):

* ``uuid`` (16 bytes): its files live in ``_indices/<uuid as 8-4-4-4-12 hex>/``, listed in
  ``files`` (name relative to that directory, size in bytes);
* ``name``, ``fields`` (the indexed field ids), ``dataset_version`` (the version it was first
  built at; kept by ``optimize_indices`` and compaction remaps), ``index_version`` (the file
  layout version of its type: 0 for BTree and Bitmap, 1 for LabelList);
* ``fragment_bitmap``: the fragment ids whose rows it holds, a portable roaring bitmap.  Rows
  of other fragments (appended later, rewritten by an update) are not in it and are scanned;
* ``index_details``: a ``google.protobuf.Any`` whose ``type_url`` names the type
  (``/lance.table.BTreeIndexDetails`` ...) and whose value is empty for scalar indices;
* ``created_at``: milliseconds since the epoch.

Several entries of one name are the *segments* (deltas) of one index.  pylance's
``list_indices`` gives one dict per entry, sorted by name; ``describe_indices`` one
:class:`IndexDescription` per name.  Vector index types register their display name with
:func:`register_index_type` (their ``index_details`` say which IVF variant they are).
"""

from __future__ import annotations

import datetime as _dt
import uuid as _uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyroaring import BitMap

from lance_gpu._proto import file_pb2, table_pb2
from lance_gpu.io.store import join
from lance_gpu.table.indices import fragment_bitmap

__all__ = [
    "BITMAP_DETAILS",
    "BTREE_DETAILS",
    "LABEL_LIST_DETAILS",
    "VECTOR_DETAILS",
    "IndexDescription",
    "IndexSegmentDescription",
    "describe_indices",
    "fragment_bitmap",
    "index_dir",
    "index_type_name",
    "index_uuid",
    "list_indices",
    "register_index_type",
]

BTREE_DETAILS = "/lance.table.BTreeIndexDetails"
BITMAP_DETAILS = "/lance.table.BitmapIndexDetails"
LABEL_LIST_DETAILS = "/lance.table.LabelListIndexDetails"

VECTOR_DETAILS = "/lance.index.pb.VectorIndexDetails"


def _top_level_fields(data: bytes) -> set[int]:
    """The field numbers present at the top level of a serialized protobuf message."""
    from google.protobuf.internal.decoder import _DecodeVarint

    found: set[int] = set()
    pos = 0
    try:
        while pos < len(data):
            key, pos = _DecodeVarint(data, pos)
            number, wire = key >> 3, key & 7
            found.add(number)
            if wire == 0:
                _, pos = _DecodeVarint(data, pos)
            elif wire == 1:
                pos += 8
            elif wire == 2:
                size, pos = _DecodeVarint(data, pos)
                pos += size
            elif wire == 5:
                pos += 4
            else:
                return found
    except IndexError:
        return found
    return found


def _vector_type_name(index: table_pb2.IndexMetadata) -> str:
    """pylance's name of a vector index, from its ``VectorIndexDetails`` (fields read from
    pylance 14's messages: 3 = HNSW graph parameters, 4 = PQ, 5 = SQ, 8 = flat): ``IVF_PQ``,
    ``IVF_HNSW_SQ`` ..., ``Vector`` when none is recognised."""
    present = _top_level_fields(bytes(index.index_details.value))
    for number, kind in ((4, "PQ"), (5, "SQ"), (8, "FLAT")):
        if number in present:
            return f"IVF_HNSW_{kind}" if 3 in present else f"IVF_{kind}"
    return "Vector"


#: type_url -> the type name pylance shows (``list_indices()[i]["type"]``), or a function of
#: the index metadata for types whose name depends on their details (vector indices).
_TYPE_NAMES: dict[str, str | Callable[[table_pb2.IndexMetadata], str]] = {
    BTREE_DETAILS: "BTree",
    BITMAP_DETAILS: "Bitmap",
    LABEL_LIST_DETAILS: "LabelList",
    VECTOR_DETAILS: _vector_type_name,
}


def register_index_type(type_url: str, name: str | Callable[[table_pb2.IndexMetadata], str]) -> None:
    """Name the index type of ``type_url`` (a string, or a function of the metadata)."""
    _TYPE_NAMES[type_url] = name


def index_type_name(index: table_pb2.IndexMetadata) -> str:
    """pylance's name of the index's type: ``"BTree"``, ``"Bitmap"``, ``"LabelList"`` ...;
    an unregistered ``/lance.table.FooIndexDetails`` reads ``"Foo"``."""
    url = index.index_details.type_url
    name = _TYPE_NAMES.get(url)
    if callable(name):
        return name(index)
    if name is not None:
        return name
    tail = url.rsplit(".", 1)[-1]
    return tail.removesuffix("IndexDetails") or "Unknown"


def index_uuid(index: table_pb2.IndexMetadata) -> str:
    """The index's uuid, hyphenated as in its directory name."""
    return str(_uuid.UUID(bytes=bytes(index.uuid.uuid)))


def index_dir(root: str, index: table_pb2.IndexMetadata) -> str:
    """The store key of the index's directory, ``<root>/_indices/<uuid>``."""
    return join(root, "_indices", index_uuid(index))


def _field_names(schema_fields: Sequence[file_pb2.Field] | None, ids: Sequence[int]) -> list[str]:
    """Dotted names of field ids (as pylance shows them)."""
    if schema_fields is None:
        return [str(i) for i in ids]
    by_id = {int(f.id): f for f in schema_fields}
    out = []
    for fid in ids:
        parts: list[str] = []
        f = by_id.get(int(fid))
        while f is not None:
            parts.append(f.name)
            f = by_id.get(int(f.parent_id)) if int(f.parent_id) >= 0 else None
        out.append(".".join(reversed(parts)) if parts else str(fid))
    return out


def list_indices(manifest: table_pb2.Manifest, section: table_pb2.IndexSection | None) -> list[dict]:
    """pylance's ``LanceDataset.list_indices()``: one dict per index entry, sorted by name:
    ``name``, ``type``, ``uuid``, ``fields`` (names), ``version`` (``dataset_version``),
    ``fragment_ids`` (a ``pyroaring.BitMap``), ``base_id``."""
    if section is None:
        return []
    out = []
    for index in section.indices:
        out.append({
            "name": index.name,
            "type": index_type_name(index),
            "uuid": index_uuid(index),
            "fields": _field_names(manifest.fields, index.fields),
            "version": int(index.dataset_version),
            "fragment_ids": fragment_bitmap(index) or BitMap(),
            "base_id": int(index.base_id) if index.HasField("base_id") else None,
        })
    out.sort(key=lambda d: d["name"])
    return out


@dataclass
class IndexSegmentDescription:
    """One entry (segment) of an index, as pylance's ``IndexSegmentDescription``."""

    uuid: str
    fragment_ids: BitMap
    dataset_version_at_last_update: int
    index_version: int
    created_at: _dt.datetime | None
    size_bytes: int | None
    base_id: int | None = None
    covering_fields: list[int] = field(default_factory=list)


@dataclass
class IndexDescription:
    """One index (all its segments), as pylance's ``IndexDescription``."""

    name: str
    type_url: str
    index_type: str
    fields: list[int]
    field_names: list[str]
    num_rows_indexed: int
    segments: list[IndexSegmentDescription]
    details: dict = field(default_factory=dict)

    @property
    def total_size_bytes(self) -> int | None:
        sizes = [s.size_bytes for s in self.segments]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    def __repr__(self) -> str:
        return (f"IndexDescription(name={self.name!r}, type_url={self.type_url!r}, num_rows_indexed="
                f"{self.num_rows_indexed}, fields={self.fields}, field_names={self.field_names}, "
                f"num_segments={len(self.segments)}, total_size_bytes={self.total_size_bytes})")


def describe_indices(
    manifest: table_pb2.Manifest, section: table_pb2.IndexSection | None, live_rows: Callable[[int], int]
) -> list[IndexDescription]:
    """pylance's ``LanceDataset.describe_indices()``: one description per index name, in the
    order of :func:`list_indices`.  ``num_rows_indexed`` counts the live rows (``live_rows(
    fragment id)``) of the fragments its segments cover that are still in the version."""
    if section is None:
        return []
    present = {int(f.id) for f in manifest.fragments}
    by_name: dict[str, list[table_pb2.IndexMetadata]] = {}
    for index in section.indices:
        by_name.setdefault(index.name, []).append(index)
    out = []
    for name in sorted(by_name):
        entries = by_name[name]
        first = entries[0]
        covered: BitMap = BitMap()
        segments = []
        for index in entries:
            frags = fragment_bitmap(index) or BitMap()
            covered |= frags
            sizes = [int(f.size_bytes) for f in index.files]
            segments.append(IndexSegmentDescription(
                uuid=index_uuid(index),
                fragment_ids=frags,
                dataset_version_at_last_update=int(index.dataset_version),
                index_version=int(index.index_version),
                created_at=_dt.datetime.fromtimestamp(int(index.created_at) / 1000, _dt.UTC)
                if index.HasField("created_at") else None,
                size_bytes=sum(sizes) if index.files else None,
                base_id=int(index.base_id) if index.HasField("base_id") else None,
            ))
        fields = [int(f) for f in first.fields]
        out.append(IndexDescription(
            name=name,
            type_url=first.index_details.type_url,
            index_type=index_type_name(first),
            fields=fields,
            field_names=_field_names(manifest.fields, fields),
            num_rows_indexed=sum(live_rows(i) for i in covered if i in present),
            segments=segments,
        ))
    return out
