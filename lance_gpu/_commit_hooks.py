# SPDX-License-Identifier: Apache-2.0
"""The post-commit hooks: what runs after every commit that publishes a version.

:func:`lance_gpu.txn.commit.commit` calls each hook after it publishes a (not detached)
version, as ``hook(store, root, manifest, base_version)`` (``base_version``: the latest
version the commit saw before its own); a hook must not raise.  Layers above ``txn``
register here without ``txn`` importing them: :mod:`lance_gpu.ops` registers pylance's
auto cleanup when the package is imported, which ``lance_gpu.dataset`` (so ``import
lance_gpu``) does.  This module imports nothing, so registering loads neither ``txn`` nor
the cleanup code (they load at the first commit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lance_gpu._proto import table_pb2
    from lance_gpu.io.store import ObjectStore

#: The registered hooks, called in order.
POST_COMMIT_HOOKS: list[Callable[[ObjectStore, str, table_pb2.Manifest, int], None]] = []
