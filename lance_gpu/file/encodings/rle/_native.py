# SPDX-License-Identifier: Apache-2.0
"""numba-compiled loops of the RLE encoder (CPU)."""

from __future__ import annotations

from typing import Any

import numpy as np

from cuda_kernels._jitcache import njit

_JIT: dict[str, Any] = {"cache": True, "nogil": True}


@njit(**_JIT)
def _rle_entries(v, a, b):  # pragma: no cover - compiled
    """Run entries (runs split at 255) of ``v[a:b]``."""
    if a >= b:
        return 0
    entries = 0
    run = 1
    for i in range(a + 1, b):
        if v[i] == v[i - 1] and run < 255:
            run += 1
        else:
            entries += 1
            run = 1
    return entries + 1


@njit(**_JIT)
def rle_encode(v, value_bytes, max_bytes, max_values):  # pragma: no cover - compiled
    """Run-length encode ``v`` (uint64) into mini-block chunks.

    Every chunk but the last holds a power-of-two number of values (at most
    ``max_values``) whose runs -- split at 255 -- take at most ``max_bytes`` of values and
    u8 lengths.  Returns (run values, run lengths, values per chunk, runs per chunk).
    """
    n = v.size
    vals = np.empty(n, np.uint64)
    lens = np.empty(n, np.uint8)
    counts = np.empty(n, np.int64)
    runs = np.empty(n, np.int64)
    k = 0
    c = 0
    pos = 0
    while pos < n:
        size = max_values
        take = 0
        while True:
            take = min(size, n - pos)
            e = _rle_entries(v, pos, pos + take)
            if e * (value_bytes + 1) <= max_bytes or size == 1:
                break
            size //= 2
        start = k
        run = 1
        for i in range(pos + 1, pos + take):
            if v[i] == v[i - 1] and run < 255:
                run += 1
            else:
                vals[k] = v[i - 1]
                lens[k] = run
                k += 1
                run = 1
        vals[k] = v[pos + take - 1]
        lens[k] = run
        k += 1
        counts[c] = take
        runs[c] = k - start
        c += 1
        pos += take
    return vals[:k], lens[:k], counts[:c], runs[:c]
