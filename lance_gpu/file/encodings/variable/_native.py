# SPDX-License-Identifier: Apache-2.0
"""numba-compiled loops of the variable-width mini-block encoder (CPU)."""

from __future__ import annotations

from typing import Any

import numpy as np

from cuda_kernels._jitcache import njit

_JIT: dict[str, Any] = {"cache": True, "nogil": True}


@njit(**_JIT)
def variable_chunk_bounds(offsets, w, aim):  # pragma: no cover - compiled
    """Chunk start indices (plus n) of variable-width values: see ``variable.chunk_bounds``."""
    n = offsets.size - 1
    out = np.empty(n + 2, np.int64)
    k = 0
    last = 0
    out[k] = 0
    k += 1
    while last < n:
        num = 1
        nxt = 2
        end = -1
        while True:
            if last + nxt > n:
                # the rest of the values: take them all if they fit
                size = offsets[n] - offsets[last] + (n - last + 1) * w
                if size <= aim:
                    end = n
                else:
                    end = last + num
                break
            size = offsets[last + nxt] - offsets[last] + (nxt + 1) * w
            if size <= aim:
                num = nxt
                nxt *= 2
            else:
                end = last + num
                break
        if end > n:
            end = n
        out[k] = end
        k += 1
        last = end
    return out[:k]


@njit(**_JIT)
def _write_variable_chunk(out, pos, offsets, data, a, b, size, w):  # pragma: no cover - compiled
    """One variable-width chunk buffer at ``out[pos:pos + size]``: the ``b - a + 1`` offsets of
    values ``a..b`` from the chunk start (``w``-byte LE words, the first one past the offsets
    themselves), then the values' bytes, then 0x48 padding up to ``size``."""
    base = (b - a + 1) * w
    first = offsets[a]
    for i in range(a, b + 1):
        v = offsets[i] - first + base
        o = pos + (i - a) * w
        for q in range(w):
            out[o + q] = (v >> (8 * q)) & 0xFF
    d = pos + base
    ln = offsets[b] - first
    out[d : d + ln] = data[first : first + ln]
    out[d + ln : pos + size] = 0x48


@njit(**_JIT)
def variable_chunks_encode(offsets, data, bounds, sizes, w):  # pragma: no cover - compiled
    """Serialise variable-width mini-block chunks (offsets from the chunk start, then bytes,
    then 0x48 padding to ``sizes``)."""
    total = 0
    for c in range(sizes.size):
        total += sizes[c]
    out = np.empty(total, np.uint8)
    pos = 0
    for c in range(bounds.size - 1):
        _write_variable_chunk(out, pos, offsets, data, bounds[c], bounds[c + 1], sizes[c], w)
        pos += sizes[c]
    return out


@njit(**_JIT)
def variable_miniblock_page(offsets, data, bounds, sizes, w, head_pad, size_bytes):  # pragma: no cover - compiled
    """The value buffer of a mini-block page of variable-width values without rep / def
    levels, in one pass: per chunk its header (u16 0 levels, the chunk buffer's size as a
    ``size_bytes`` LE word, 0xFE up to ``head_pad``), then the chunk buffer as
    :func:`variable_chunks_encode` writes it, then zeros up to a multiple of 8.  Returns
    ``(bytes, bytes per chunk)``."""
    nchunks = sizes.size
    chunk_bytes = np.empty(nchunks, np.int64)
    total = 0
    for c in range(nchunks):
        chunk_bytes[c] = head_pad + (sizes[c] + 7) // 8 * 8
        total += chunk_bytes[c]
    out = np.empty(total, np.uint8)
    pos = 0
    for c in range(nchunks):
        out[pos] = 0
        out[pos + 1] = 0
        v = sizes[c]
        for q in range(size_bytes):
            out[pos + 2 + q] = (v >> (8 * q)) & 0xFF
        for q in range(2 + size_bytes, head_pad):
            out[pos + q] = 0xFE
        p = pos + head_pad
        _write_variable_chunk(out, p, offsets, data, bounds[c], bounds[c + 1], sizes[c], w)
        out[p + sizes[c] : pos + chunk_bytes[c]] = 0
        pos += chunk_bytes[c]
    return out, chunk_bytes
