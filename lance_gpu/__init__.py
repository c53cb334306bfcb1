# SPDX-License-Identifier: Apache-2.0
"""lance-gpu: read Lance datasets on the GPU (cuDF) with a fast CPU fallback.

The API mirrors pylance: ``lance_gpu.dataset(uri).to_table(columns=, filter=)``;
``lance_gpu.read_cudf(uri)`` / ``dataset(uri).to_cudf()`` give a ``cudf.DataFrame`` decoded
on the GPU.  Nothing here imports CUDA libraries; the GPU path loads them on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lance_gpu._lazy import lazy_dir, lazy_names
from lance_gpu.dataset import LanceDataset, LanceFragment, dataset, write_dataset
from lance_gpu.errors import (
    ArgumentTypeError,
    CommitConflictError,
    CorruptFileError,
    CpuDecodeWarning,
    DatasetExistsError,
    DatasetNotFoundError,
    FilterError,
    GpuFallbackWarning,
    GpuUnavailableError,
    IncompatibleSchemaError,
    InvalidArgumentError,
    LanceGpuError,
    NegativeArgumentError,
    RetryableCommitConflictError,
    RowIndexError,
    SchemaMismatchError,
    UnknownDeviceError,
    UnsupportedEncodingError,
    UnsupportedFeatureError,
)
from lance_gpu.io.store import process_read_counters
from lance_gpu.scan import LanceScanner, ScanPlan
from lance_gpu.table.blobs import BlobColumn, BlobFile

if TYPE_CHECKING:
    from lance_gpu.tools import convert, verify
    from lance_gpu.txn import FragmentMetadata, LanceOperation, Transaction
    from lance_gpu.write.udf import batch_udf

__version__ = "0.1.0"

# The tools, the transaction model and the UDF decorator load on first use, as any
# subpackage (``lance_gpu.write``...) not imported yet: ``import lance_gpu`` loads what opening
# and reading a dataset runs (:mod:`lance_gpu._lazy`).
_LAZY = {
    "convert": ".tools", "verify": ".tools", "batch_udf": ".write.udf",
    "FragmentMetadata": ".txn", "LanceOperation": ".txn", "Transaction": ".txn",
}
__getattr__ = lazy_names(__name__, _LAZY)
__dir__ = lazy_dir(__name__, _LAZY)


def iops_counter() -> int:
    """Read requests made by every dataset and file of this process so far (pylance's
    ``lance.iops_counter``; a coalesced group of ranges is one request)."""
    return process_read_counters()[0]


def bytes_read_counter() -> int:
    """Bytes read by every dataset and file of this process so far (pylance's
    ``lance.bytes_read_counter``)."""
    return process_read_counters()[1]


def read_cudf(
    uri, columns=None, filter=None, version=None, *, on_cpu_fallback: str = "warn", storage_options=None, store=None  # noqa: A002
):
    """Read a Lance dataset into a ``cudf.DataFrame``, decoded on the GPU (as
    ``cudf.read_parquet`` does for Parquet): ``dataset(uri, version).to_cudf(columns, filter)``.
    ``storage_options`` / ``store`` as in :func:`dataset` (``s3://`` etc.)."""
    ds = dataset(uri, version, device="gpu", storage_options=storage_options, store=store)
    return ds.to_cudf(columns, filter, on_cpu_fallback=on_cpu_fallback)


__all__ = [
    "ArgumentTypeError",
    "BlobColumn",
    "BlobFile",
    "CommitConflictError",
    "CorruptFileError",
    "CpuDecodeWarning",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "FilterError",
    "FragmentMetadata",
    "GpuFallbackWarning",
    "GpuUnavailableError",
    "IncompatibleSchemaError",
    "InvalidArgumentError",
    "LanceDataset",
    "LanceFragment",
    "LanceGpuError",
    "LanceOperation",
    "LanceScanner",
    "NegativeArgumentError",
    "RetryableCommitConflictError",
    "RowIndexError",
    "ScanPlan",
    "SchemaMismatchError",
    "Transaction",
    "UnknownDeviceError",
    "UnsupportedEncodingError",
    "UnsupportedFeatureError",
    "batch_udf",
    "bytes_read_counter",
    "convert",
    "dataset",
    "iops_counter",
    "read_cudf",
    "verify",
    "write_dataset",
]
