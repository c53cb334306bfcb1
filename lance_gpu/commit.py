# SPDX-License-Identifier: Apache-2.0
"""pylance's ``lance.commit`` names: :class:`CommitConflictError` (raised when a concurrent
writer committed an incompatible change first; also an ``OSError``, as pylance's)."""

from __future__ import annotations

from lance_gpu.errors import CommitConflictError

__all__ = ["CommitConflictError"]
