# SPDX-License-Identifier: Apache-2.0
"""numba-compiled loops of the encoders: byte-range scatter, variable-width chunking and
RLE runs (used by the page encoders here and by :mod:`lance_gpu.write`).

Everything else in the writer is vectorised numpy; these are the loops that are not.
"""

from __future__ import annotations

import numpy as np
from cuda_kernels._jitcache import njit

_JIT = {"cache": True, "nogil": True}


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
