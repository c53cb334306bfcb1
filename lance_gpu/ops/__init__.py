# SPDX-License-Identifier: Apache-2.0
"""Dataset operations built on the table layer (cleanup of old versions, housekeeping,
sorted scans, SQL, statistics, vector index builds).

Importing the package registers pylance's auto cleanup as a post-commit hook
(:mod:`lance_gpu._commit_hooks`); ``lance_gpu.dataset`` imports the package, so every
process that imports ``lance_gpu`` runs it after each commit, whichever API committed.  The
submodules load on first use (``ops.housekeeping``...; :mod:`lance_gpu._lazy`): the hook
loads :mod:`~lance_gpu.ops.housekeeping` at the first commit, a read never does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lance_gpu._commit_hooks import POST_COMMIT_HOOKS
from lance_gpu._lazy import lazy_names

if TYPE_CHECKING:
    from lance_gpu._proto import table_pb2
    from lance_gpu.io.store import ObjectStore
    from lance_gpu.ops import cleanup as cleanup
    from lance_gpu.ops import housekeeping as housekeeping
    from lance_gpu.ops import ordering as ordering
    from lance_gpu.ops import sql as sql
    from lance_gpu.ops import stats as stats
    from lance_gpu.ops import vector_index as vector_index

__getattr__ = lazy_names(__name__, {})


def _auto_cleanup(store: ObjectStore, root: str, manifest: table_pb2.Manifest, base_version: int) -> None:
    """The post-commit hook: :func:`lance_gpu.ops.housekeeping.auto_cleanup`, imported at the
    first commit (the commit has loaded the table and txn layers it needs by then)."""
    from lance_gpu.ops import housekeeping

    housekeeping.auto_cleanup(store, root, manifest, base_version)


POST_COMMIT_HOOKS.append(_auto_cleanup)
