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

Nothing here imports the dataset module.  The names below and the submodules load on first
use (:mod:`lance_gpu._lazy`): ``lance_gpu.dataset`` imports this package, a read never runs
a line of it.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from lance_gpu._lazy import lazy_dir, lazy_names

if TYPE_CHECKING:
    from lance_gpu.txn.commit import DEFAULT_COMMIT_LOCK as DEFAULT_COMMIT_LOCK
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

_LAZY = {
    "commit": ".commit", "run_with_retries": ".commit", "DEFAULT_COMMIT_LOCK": ".commit",
    "DataFile": ".fragment", "DeletionFile": ".fragment", "FragmentMetadata": ".fragment",
    "RowDatasetVersionMeta": ".fragment", "RowIdMeta": ".fragment",
    "LanceOperation": ".operations", "Operation": ".operations",
    "Transaction": ".transaction", "commit_operation": ".transaction", "commit_transactions": ".transaction",
}
__getattr__ = lazy_names(__name__, _LAZY)
__dir__ = lazy_dir(__name__, _LAZY)


class _Package(types.ModuleType):
    """This package's module type: ``txn.commit`` is the function :func:`~lance_gpu.txn.commit.commit`,
    as when the package imported it eagerly.  Python binds a submodule to its package's
    attribute once the submodule is loaded, which (the submodule loading after the package
    now) would make ``txn.commit`` the module; that binding takes the function instead (the
    module is ``sys.modules["lance_gpu.txn.commit"]``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "commit" and isinstance(value, types.ModuleType):
            value = value.commit
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
