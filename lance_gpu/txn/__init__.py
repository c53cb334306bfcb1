# SPDX-License-Identifier: Apache-2.0
"""The transaction model: operation types, their conflict rules, and the one commit.

* :mod:`~lance_gpu.txn.fragment` -- :class:`FragmentMetadata`, :class:`DataFile`,
  :class:`DeletionFile`, row-id metadata (pylance's shapes; JSON and pickle round trips).
* :mod:`~lance_gpu.txn.operations` -- :class:`LanceOperation` (``Overwrite``, ``Append``,
  ``Delete``, ``Update``, ``Merge``, ``Restore``, ``Rewrite``, ``Project``,
  ``DataReplacement``, ``ReserveFragments``, ``UpdateConfig``), each with its conflict rules.
* :mod:`~lance_gpu.txn.commit` -- :func:`commit` (the only way a version is committed) and
  :func:`run_with_retries` (re-planning after retryable conflicts).
* :mod:`~lance_gpu.txn.publish` -- the bytes of a commit (manifest files, put-if-absent,
  transaction files, the version hint).
* :mod:`~lance_gpu.txn.transaction` -- pylance's ``LanceDataset.commit`` / ``commit_batch``
  (:func:`commit_operation`, :func:`commit_transactions`) and :class:`Transaction`.

Nothing here imports the dataset module.
"""

from __future__ import annotations

from lance_gpu.txn.commit import commit, run_with_retries
from lance_gpu.txn.fragment import (
    DataFile,
    DeletionFile,
    FragmentMetadata,
    RowDatasetVersionMeta,
    RowIdMeta,
)
from lance_gpu.txn.operations import LanceOperation, Operation
from lance_gpu.txn.transaction import Transaction, commit_operation, commit_transactions

__all__ = [
    "DataFile",
    "DeletionFile",
    "FragmentMetadata",
    "LanceOperation",
    "Operation",
    "RowDatasetVersionMeta",
    "RowIdMeta",
    "Transaction",
    "commit",
    "commit_operation",
    "commit_transactions",
    "run_with_retries",
]
