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
        """Bytes on disk of every field of the schema, ordered by field id."""
        ds = self._ds
        totals = {f.id: 0 for top in ds.lance_schema.fields for f in top.walk()}
        for frag in ds.fragments:
            for df in frag.pb.files:
                reader = frag.file_reader(join(ds.root, "data", df.path))
                for fid, col in column_index_map(df, ds.lance_schema).items():
                    pages = reader.column(col).pages
                    totals[fid] = totals.get(fid, 0) + sum(sum(p.buffer_sizes) for p in pages)
        return DataStatistics([FieldStatistics(fid, size) for fid, size in sorted(totals.items())])
