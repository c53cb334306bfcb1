# SPDX-License-Identifier: Apache-2.0
"""``ds.stats``: statistics of one dataset version, as pylance reports them.

* ``dataset_stats()``: deleted rows, fragments and small fragments (fewer than 1024 physical
  rows), from the manifest (:func:`lance_gpu.table.versions.dataset_stats`).
* ``data_stats()``: per field (every field of the schema, parents and children, by id), the
  bytes its column's pages take on disk over all data files of the version: the sum of the
  page buffer sizes in each file's column metadata. A field without a column of its own (a
  list or struct parent in 2.1+ files, a field no file holds) counts 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from lance_gpu.errors import IndexStatsNotFoundError
from lance_gpu.file.legacy import is_legacy_file_version
from lance_gpu.index.metadata import fragment_bitmap, index_type_name
from lance_gpu.index.scalar import BitmapIndex, BTreeIndex, open_scalar_index
from lance_gpu.io.store import join
from lance_gpu.table.schema import column_index_map
from lance_gpu.table.versions import dataset_stats


@dataclass(frozen=True)
class FieldStatistics:
    """Bytes on disk of one field (pylance's ``FieldStatistics``)."""

    id: int
    bytes_on_disk: int


@dataclass(frozen=True)
class DataStatistics:
    """Per-field statistics of one version (pylance's ``DataStatistics``)."""

    fields: list[FieldStatistics] = field(default_factory=list)


class DatasetStats:
    """``ds.stats`` of one dataset version."""

    def __init__(self, ds) -> None:  # ds: TableSnapshot
        self._ds = ds

    def dataset_stats(self, max_rows_per_group: int = 1024) -> dict[str, int]:
        """``{"num_deleted_rows", "num_fragments", "num_small_files"}`` as pylance's.

        Parameters
        ----------
        max_rows_per_group : int, default 1024
            Accepted for pylance compatibility; it does not change the result.
        """
        return dataset_stats(self._ds.manifest)

    def data_stats(self) -> DataStatistics:
        """Bytes on disk of every field of the schema, ordered by field id (legacy files
        count none, as pylance's)."""
        ds = self._ds
        totals = {f.id: 0 for top in ds.lance_schema.fields for f in top.walk()}
        for frag in ds.fragments:
            for df in frag.pb.files:
                if is_legacy_file_version(int(df.file_major_version), int(df.file_minor_version)):
                    continue  # pylance counts no bytes for legacy (0.1) files
                reader = frag.file_reader(join(ds.root, "data", df.path))
                for fid, col in column_index_map(df, ds.lance_schema).items():
                    pages = reader.column(col).pages
                    totals[fid] = totals.get(fid, 0) + sum(sum(p.buffer_sizes) for p in pages)
        return DataStatistics([FieldStatistics(fid, size) for fid, size in sorted(totals.items())])

    def index_stats(self, index_name: str) -> dict:
        """Statistics of the index ``index_name``, as pylance's: type, segments (per segment
        ``min`` / ``max`` / ``num_pages`` of a BTree, ``num_bitmaps`` of a Bitmap or LabelList),
        indexed and unindexed fragments and live rows, ``updated_at_timestamp_ms`` (the newest
        segment's ``created_at``).  Raises ``KeyError`` for an unknown name.

        Parameters
        ----------
        index_name : str
            The index name.
        """

        ds = self._ds
        section = ds.manifest_file.index_section
        entries = [i for i in (section.indices if section is not None else []) if i.name == index_name]
        if not entries:
            raise IndexStatsNotFoundError(f'Index "{index_name}" not found')
        live = {f.fragment_id: f.live_count() for f in ds.fragments}
        segments, per_delta, covered = [], [], set()
        for entry in entries:
            frags = set(fragment_bitmap(entry) or ()) & set(live)
            covered |= frags
            per_delta.append(sum(live[i] for i in frags))
            reader = open_scalar_index(ds.store, ds.root, entry)
            if isinstance(reader, BTreeIndex):
                # the first page's first value and the last page's last (nulls sort first)
                n = len(reader.min)
                low = reader.min[0].as_py() if n else None
                high = reader.max[n - 1].as_py() if n else None
                segments.append({"min": _show(low, reader.type), "max": _show(high, reader.type),
                                 "num_pages": int(reader.page_idx.size)})
            elif isinstance(reader, BitmapIndex):
                segments.append({"num_bitmaps": len(reader.keys)})
            else:
                segments.append({})
        return {
            "index_type": index_type_name(entries[0]),
            "name": index_name,
            "num_indices": len(entries),
            "num_segments": len(entries),
            "indices": segments,
            "segments": segments,
            "num_indexed_fragments": len(covered),
            "num_indexed_rows": sum(live[i] for i in covered),
            "num_unindexed_fragments": len(set(live) - covered),
            "num_unindexed_rows": sum(n for i, n in live.items() if i not in covered),
            "num_indexed_rows_per_delta": per_delta,
            "updated_at_timestamp_ms": max(int(e.created_at) for e in entries),
        }


def _show(value: object, t: object) -> str:
    """A value as pylance's index statistics print it (DataFusion's scalar display: floats
    in the shortest plain digits, ``49`` for 49.0; NULL)."""
    if value is None:
        return "NULL"
    if isinstance(t, pa.DataType) and pa.types.is_floating(t):
        x = np.float32(value) if t == pa.float32() else np.float64(value)  # type: ignore[arg-type]
        if np.isnan(x):
            return "NaN"
        if np.isinf(x):
            return "inf" if x > 0 else "-inf"
        return np.format_float_positional(x, unique=True, trim="-")
    return str(value)
