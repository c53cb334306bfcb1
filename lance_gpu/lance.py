# SPDX-License-Identifier: Apache-2.0
"""The names pylance's native module (``lance.lance``) exports that lance-gpu implements,
for code that imports them from there (``from lance.lance import Compaction``)."""

from __future__ import annotations

from typing import Any

from lance_gpu.optimize import Compaction, CompactionMetrics, CompactionPlan, CompactionTask, RewriteResult
from lance_gpu.schema import LanceSchema

__all__ = ["Compaction", "CompactionMetrics", "CompactionPlan", "CompactionTask", "LanceSchema", "RewriteResult",
           "manifest_needs_migration"]


def manifest_needs_migration(dataset: Any) -> bool:
    """Whether the dataset version's manifest lacks what current writers record and a
    rewrite of it would add: the writer version, a fragment's ``physical_rows``, or a
    deletion file's count of deleted rows (manifests of very old pylance versions).

    Parameters
    ----------
    dataset : LanceDataset
        The dataset version to check.
    """
    m = dataset.manifest
    if not m.HasField("writer_version"):
        return True
    for frag in m.fragments:
        if int(frag.physical_rows) == 0 and len(frag.files):
            return True
        if frag.HasField("deletion_file") and int(frag.deletion_file.num_deleted_rows) == 0:
            return True
    return False
