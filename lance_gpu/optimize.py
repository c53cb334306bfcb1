# SPDX-License-Identifier: Apache-2.0
"""pylance's ``lance.optimize``: distributed compaction (:class:`Compaction` with
:class:`CompactionPlan`, :class:`CompactionTask`, :class:`RewriteResult`) and the
:class:`CompactionMetrics` / :class:`CompactionOptions` types; see
:mod:`lance_gpu.write.distributed_compaction`."""

from __future__ import annotations

from typing import TypedDict

from lance_gpu.write.compaction import CompactionMetrics
from lance_gpu.write.distributed_compaction import Compaction, CompactionPlan, CompactionTask, RewriteResult

__all__ = ["Compaction", "CompactionMetrics", "CompactionOptions", "CompactionPlan", "CompactionTask", "RewriteResult"]


class CompactionOptions(TypedDict, total=False):
    """Options of ``compact_files`` / :meth:`Compaction.plan` (pylance's keys)."""

    target_rows_per_fragment: int
    max_rows_per_group: int
    max_bytes_per_file: int
    materialize_deletions: bool
    materialize_deletions_threshold: float
    num_threads: int
    batch_size: int
    defer_index_remap: bool
