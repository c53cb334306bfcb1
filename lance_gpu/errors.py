# SPDX-License-Identifier: Apache-2.0
"""The error types of lance-gpu.

Every error we raise derives from :class:`LanceGpuError` and from the builtin a user would
catch without knowing us (pyarrow's pattern: ``ArrowInvalid(ValueError, ArrowException)``).
"""

from __future__ import annotations


class LanceGpuError(Exception):
    """Base class of every error lance-gpu raises."""


class DatasetNotFoundError(LanceGpuError, FileNotFoundError):
    """The URI holds no Lance dataset, or the requested version does not exist."""


class DatasetExistsError(LanceGpuError, FileExistsError):
    """``mode="create"`` was asked for where a dataset already exists; nothing was written."""


class CorruptFileError(LanceGpuError, ValueError):
    """A manifest, data file or deletion file is truncated, malformed or inconsistent.

    The message always names the file.
    """

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"corrupt Lance file {self.path}: {reason}")


class RowIndexError(LanceGpuError, IndexError, OSError):
    """A row position (``take``) lies outside the dataset's rows.

    An ``IndexError``, and an ``OSError`` as pylance raises in the same case."""


class UnsupportedEncodingError(LanceGpuError, NotImplementedError):
    """A page uses an encoding, layout or file version this reader does not decode."""


class UnsupportedFeatureError(LanceGpuError, NotImplementedError):
    """The dataset sets a reader or writer feature flag we do not implement."""


class SchemaMismatchError(LanceGpuError, ValueError):
    """Data does not match the dataset's schema, or a requested column does not exist."""


class FilterError(LanceGpuError, ValueError):
    """A filter predicate could not be parsed or refers to unknown columns."""


class CommitConflictError(LanceGpuError, RuntimeError):
    """A concurrent writer committed an incompatible change first."""


class RetryableCommitConflictError(CommitConflictError):
    """A concurrent writer changed what this operation read (e.g. it deleted or compacted
    the same fragments): re-running the operation on the latest version may succeed.
    ``LanceDataset.delete`` does that itself, ``conflict_retries`` times."""


class GpuUnavailableError(LanceGpuError, ImportError):
    """``device="gpu"`` was requested but no usable CUDA device or library is present."""
