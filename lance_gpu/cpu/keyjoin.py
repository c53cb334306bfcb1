# SPDX-License-Identifier: Apache-2.0
"""Equality join of one integer key column (``merge_insert``'s match), numba-compiled.

The source keys (the smaller side) go into an open-addressing hash table of ``2^bits``
slots (at most half full), linear probing, Fibonacci hashing (``h = key *
0x9E3779B97F4A7C15``, slot ``h >> (64 - bits)``).  Slot ``i`` is the pair
``table[2i] = key``, ``table[2i + 1] = code``: -1 empty, ``r >= 0`` the only source row
with that key, ``-(r + 2)`` the first of several source rows with that key.  One probe
thus reads one cache line.  In front of the table, a one-hash Bloom filter of
``2^filter_bits`` bits (about 16 per source key, so it stays in cache) answers most
misses: a target key whose bit (``h >> (64 - filter_bits)``) is clear matches nothing.

Target keys are taken in chunks of :data:`_PROBE_CHUNK` rows, on one core (a parallel
region stalls whenever the machine is busier than its cores: the caller probes each
fragment's keys as they come instead); a chunk whose keys are already ascending (ids, timestamps: the common case) is merged with the sorted
source keys instead, a sequential walk without the table.  The result is, per target row,
the source row it matches (-1: none).  Null keys (``valid`` false) never match, as SQL
equality says.

Keys are compared as int64: any integer or temporal column of up to 64 bits is read as
its raw little-endian values, sign-extended, which keeps equality (both sides have the
same type).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cuda_kernels._jitcache import njit

__all__ = ["KeyTable", "int_keys"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# Target rows per probe chunk (each chooses the merge or the table on its own).
_PROBE_CHUNK = 1 << 16


@njit(cache=True, nogil=True)
def _build(keys, valid, bits, filter_bits):  # pragma: no cover - compiled
    """The slot pairs and the Bloom filter words of ``keys`` (rows with ``valid`` false
    left out)."""
    size = np.int64(1) << bits
    mask = size - 1
    shift = np.uint64(64 - bits)
    fshift = np.uint64(64 - filter_bits)
    table = np.empty(2 * size, np.int64)
    for i in range(size):
        table[2 * i + 1] = -1
    bloom = np.zeros(max((np.int64(1) << filter_bits) // 64, 1), np.uint64)
    for i in range(keys.size):
        if not valid[i]:
            continue
        k = keys[i]
        h = np.uint64(k) * _GOLDEN
        f = np.int64(h >> fshift)
        bloom[f >> 6] |= np.uint64(1) << np.uint64(f & 63)
        s = np.int64(h >> shift)
        while True:
            code = table[2 * s + 1]
            if code == -1:
                table[2 * s] = k
                table[2 * s + 1] = i
                break
            if table[2 * s] == k:
                if code >= 0:
                    table[2 * s + 1] = -(code + 2)
                break
            s = (s + 1) & mask
    return table, bloom


@njit(cache=True, nogil=True)
def _probe_range(keys, valid, table, bloom, bits, filter_bits, tgt, src, lo, hi):  # pragma: no cover - compiled
    """The matches of target rows ``lo..hi``, written from ``tgt[lo]`` / ``src[lo]`` on
    (target row, source row); returns (count, first row whose key more than one source
    row holds or -1)."""
    mask = (np.int64(1) << bits) - 1
    shift = np.uint64(64 - bits)
    fshift = np.uint64(64 - filter_bits)
    ambiguous = np.int64(-1)
    w = lo
    for i in range(lo, hi):
        if not valid[i]:
            continue
        k = keys[i]
        h = np.uint64(k) * _GOLDEN
        f = np.int64(h >> fshift)
        if (bloom[f >> 6] >> np.uint64(f & 63)) & np.uint64(1) == 0:
            continue
        s = np.int64(h >> shift)
        while True:
            code = table[2 * s + 1]
            if code == -1:
                break
            if table[2 * s] == k:
                tgt[w] = i
                if code >= 0:
                    src[w] = code
                else:
                    src[w] = -code - 2
                    if ambiguous < 0:
                        ambiguous = np.int64(i)
                w += 1
                break
            s = (s + 1) & mask
    return w - lo, ambiguous


@njit(cache=True, nogil=True)
def _ascending(keys, valid, lo, hi):  # pragma: no cover - compiled
    """Whether the valid keys of rows ``lo..hi`` never decrease."""
    have = False
    last = np.int64(0)
    for i in range(lo, hi):
        if valid[i]:
            if have and keys[i] < last:
                return False
            last = keys[i]
            have = True
    return True


@njit(cache=True, nogil=True)
def _merge_range(keys, valid, sorted_keys, sorted_rows, tgt, src, lo, hi):  # pragma: no cover - compiled
    """As :func:`_probe_range`, for rows ``lo..hi`` whose valid keys ascend: a walk along
    the sorted source keys (equal source keys are adjacent there)."""
    m = sorted_keys.size
    ambiguous = np.int64(-1)
    j = np.int64(0)
    first = True
    w = lo
    for i in range(lo, hi):
        if not valid[i]:
            continue
        k = keys[i]
        if first:
            j = np.int64(np.searchsorted(sorted_keys, k))
            first = False
        while j < m and sorted_keys[j] < k:
            j += 1
        if j < m and sorted_keys[j] == k:
            tgt[w] = i
            src[w] = sorted_rows[j]
            w += 1
            if j + 1 < m and sorted_keys[j + 1] == k and ambiguous < 0:
                ambiguous = np.int64(i)
    return w - lo, ambiguous


@njit(cache=True, nogil=True)
def _probe(keys, valid, table, bloom, bits, filter_bits, sorted_keys, sorted_rows):  # pragma: no cover - compiled
    n = keys.size
    tasks = (n + _PROBE_CHUNK - 1) // _PROBE_CHUNK
    counts = np.zeros(tasks, np.int64)
    first = np.full(tasks, -1, np.int64)
    # uninitialised: a chunk writes its matches at the start of its own range
    tgt = np.empty(n, np.int64)
    src = np.empty(n, np.int64)
    for t in range(tasks):
        lo = t * _PROBE_CHUNK
        hi = min(lo + _PROBE_CHUNK, n)
        if _ascending(keys, valid, lo, hi):
            counts[t], first[t] = _merge_range(keys, valid, sorted_keys, sorted_rows, tgt, src, lo, hi)
        else:
            counts[t], first[t] = _probe_range(keys, valid, table, bloom, bits, filter_bits, tgt, src, lo, hi)
    total = counts.sum()
    tgt_out = np.empty(total, np.int64)
    src_out = np.empty(total, np.int64)
    w = 0
    ambiguous = np.int64(-1)
    for t in range(tasks):
        lo = t * _PROBE_CHUNK
        tgt_out[w : w + counts[t]] = tgt[lo : lo + counts[t]]
        src_out[w : w + counts[t]] = src[lo : lo + counts[t]]
        w += counts[t]
        if ambiguous < 0 and first[t] >= 0:
            ambiguous = first[t]
    return tgt_out, src_out, ambiguous


def int_keys(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(int64 keys, bool valid)`` of an integer or temporal column of at most 64 bits,
    or None for any other type (the caller joins those another way)."""
    typ = column.type
    if not (pa.types.is_integer(typ) or pa.types.is_temporal(typ)) or typ.bit_width not in (8, 16, 32, 64):
        return None
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(arr)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.bool_)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.dtype(f"<i{typ.bit_width // 8}"))[arr.offset : arr.offset + n]
    keys = raw.astype(np.int64, copy=False)
    valid = arr.is_valid().to_numpy(zero_copy_only=False) if arr.null_count else np.ones(n, np.bool_)
    return keys, valid


class KeyTable:
    """The hash table of the source's keys (:func:`int_keys` of the source column), probed
    by the target's keys chunk by chunk."""

    def __init__(self, source: tuple[np.ndarray, np.ndarray]) -> None:
        keys, valid = source
        n = max(int(keys.size), 1)
        self.bits = max(4, (2 * n - 1).bit_length())
        self.filter_bits = max(6, (16 * n - 1).bit_length())
        self.table, self.bloom = _build(keys, valid, self.bits, self.filter_bits)
        rows = np.flatnonzero(valid)
        order = np.argsort(keys[rows], kind="stable")
        self.sorted_rows = rows[order]
        self.sorted_keys = np.ascontiguousarray(keys[self.sorted_rows])

    def probe(self, target: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, int]:
        """The matching (target row, source row) pairs, target rows ascending, and the first
        target row that more than one source row matches (-1: none)."""
        keys, valid = target
        if not keys.size:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), -1
        tgt, src, ambiguous = _probe(keys, valid, self.table, self.bloom, self.bits, self.filter_bits,
                                     self.sorted_keys, self.sorted_rows)
        return tgt, src, int(ambiguous)
