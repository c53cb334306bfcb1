# SPDX-License-Identifier: Apache-2.0
"""Whole-dataset tools built on the public API: :func:`convert` (Parquet / CSV / Arrow IPC /
pyarrow dataset <-> Lance, streaming), :func:`verify` (decode every page, check deletion files
and row ids) and :func:`cleanup_old_versions` (by URI; the one implementation is
:mod:`lance_gpu.ops.cleanup`, behind ``LanceDataset.cleanup_old_versions``).  The command line
(``lance_gpu.cli``) is a thin shell over these.
"""

from __future__ import annotations

import datetime as _dt
import os

from lance_gpu.ops.cleanup import CleanupStats
from lance_gpu.tools._open import StorageOptions, open_dataset
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


def cleanup_old_versions(
    uri: str | os.PathLike[str],
    older_than: _dt.timedelta | None = None,
    retain_versions: int | None = None,
    *,
    delete_unverified: bool = False,
    error_if_tagged_old_versions: bool = True,
    storage_options: StorageOptions | None = None,
) -> CleanupStats:
    """Open the dataset at ``uri`` and run its ``cleanup_old_versions`` (pylance's rules, see
    :mod:`lance_gpu.ops.cleanup`).

    Parameters
    ----------
    uri : str or path
        The dataset.
    older_than : timedelta, optional
        Remove versions committed longer ago than this; default two weeks when
        ``retain_versions`` is not given either.
    retain_versions : int, optional
        Keep the newest N versions (positive, else :class:`~lance_gpu.errors.CleanupError`).
    delete_unverified : bool, default False
        Also delete files no version references however young they are (leftovers of
        failed writes -- or of a write still running: only safe when no other process writes).
    error_if_tagged_old_versions : bool, default True
        Raise :class:`~lance_gpu.errors.TaggedVersionError` (nothing removed) when a version
        that would be removed is tagged; otherwise tagged versions are kept silently.
    storage_options : dict, optional
        Passed to :func:`lance_gpu.dataset`.

    Returns
    -------
    CleanupStats
        What was removed.
    """
    ds = open_dataset(uri, None, storage_options)
    return ds.cleanup_old_versions(  # type: ignore[no-any-return]
        older_than,
        retain_versions,
        delete_unverified=delete_unverified,
        error_if_tagged_old_versions=error_if_tagged_old_versions,
    )
