# SPDX-License-Identifier: Apache-2.0
"""lance-gpu: read Lance datasets on the GPU (cuDF) with a fast CPU fallback.

The API mirrors pylance: ``lance_gpu.dataset(uri).to_table(columns=, filter=)``.  Nothing
here imports CUDA libraries; the GPU path loads them on first use.
"""

from __future__ import annotations

from lance_gpu.dataset import LanceDataset, LanceFragment, dataset
from lance_gpu.errors import (
    CommitConflictError,
    CorruptFileError,
    DatasetNotFoundError,
    FilterError,
    GpuUnavailableError,
    LanceGpuError,
    RetryableCommitConflictError,
    SchemaMismatchError,
    UnsupportedEncodingError,
    UnsupportedFeatureError,
)
from lance_gpu.write import DatasetExistsError, write_dataset

__version__ = "0.1.0"

__all__ = [
    "CommitConflictError",
    "CorruptFileError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "FilterError",
    "GpuUnavailableError",
    "LanceDataset",
    "LanceFragment",
    "LanceGpuError",
    "RetryableCommitConflictError",
    "SchemaMismatchError",
    "UnsupportedEncodingError",
    "UnsupportedFeatureError",
    "dataset",
    "write_dataset",
]
