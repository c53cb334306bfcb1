# SPDX-License-Identifier: Apache-2.0
"""The names pylance's native module (``lance.lance``) exports that lance-gpu implements,
for code that imports them from there (``from lance.lance import Compaction``)."""

from __future__ import annotations

from lance_gpu.optimize import Compaction, CompactionMetrics, CompactionPlan, CompactionTask, RewriteResult
from lance_gpu.schema import LanceSchema

__all__ = ["Compaction", "CompactionMetrics", "CompactionPlan", "CompactionTask", "LanceSchema", "RewriteResult"]
