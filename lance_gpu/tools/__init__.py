# SPDX-License-Identifier: Apache-2.0
"""Whole-dataset tools built on the public API: :func:`convert` (Parquet / CSV / Arrow IPC /
pyarrow dataset <-> Lance, streaming), :func:`verify` (decode every page, check deletion files
and row ids) and :func:`cleanup_old_versions`.  The command line (``lance_gpu.cli``) is a thin
shell over these.
"""

from __future__ import annotations

from lance_gpu.tools.cleanup import CleanupStats, cleanup_old_versions
from lance_gpu.tools.convert import ConvertResult, convert
from lance_gpu.tools.describe import DatasetInfo, describe
from lance_gpu.tools.verify import VerifyProblem, VerifyReport, verify

__all__ = [
    "CleanupStats",
    "ConvertResult",
    "DatasetInfo",
    "VerifyProblem",
    "VerifyReport",
    "cleanup_old_versions",
    "convert",
    "describe",
    "verify",
]
