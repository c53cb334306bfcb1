# SPDX-License-Identifier: Apache-2.0
"""numba-compiled loops shared by the encoders: byte-range scatter and the constant test (used
by the page encoders here and by :mod:`lance_gpu.write`; each encoding's own loops live in its
package, e.g. ``variable/_native.py``).

Everything else in the writer is vectorised numpy; these are the loops that are not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cuda_kernels._jitcache import njit

_JIT: dict[str, Any] = {"cache": True, "nogil": True}


@njit(**_JIT)
def scatter_ranges(dst, dst_starts, src, src_starts, lengths):  # pragma: no cover - compiled
    """``dst[dst_starts[i] : +lengths[i]] = src[src_starts[i] : +lengths[i]]`` for every i."""
    for i in range(lengths.size):
        d = dst_starts[i]
        s = src_starts[i]
        n = lengths[i]
        if n > 16:
            dst[d : d + n] = src[s : s + n]
        else:
            for k in range(n):
                dst[d + k] = src[s + k]


@njit(**_JIT)
def all_rows_equal(data, width):  # pragma: no cover - compiled
    """Are all ``width``-byte rows of ``data`` equal to the first?  Stops at the first
    difference."""
    n = data.size // width
    for i in range(1, n):
        base = i * width
        for k in range(width):
            if data[base + k] != data[k]:
                return False
    return True
