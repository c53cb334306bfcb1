# SPDX-License-Identifier: Apache-2.0
"""Equality join of one integer key column (``merge_insert``'s match), numba-compiled.

The source keys (the smaller side) go into an open-addressing hash table of ``2^bits``
slots (``bits`` such that the table is at most half full), linear probing, Fibonacci
hashing (``key * 0x9E3779B97F4A7C15 >> (64 - bits)``).  A slot holds a key, the first
source row with that key, and whether a later source row repeated it.  Every target key
is then looked up once: the result is, per target row, the source row it matches (-1:
none).  Null keys (``valid`` false) never match, as SQL equality says.

Keys are compared as int64: any integer or temporal column of up to 64 bits is read as
its raw little-endian values, sign-extended, which keeps equality (both sides have the
same type).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import prange

from cuda_kernels._jitcache import njit

__all__ = ["int_keys", "match_int_keys"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# Target rows per parallel probe task.
_PROBE_CHUNK = 1 << 16


@njit(cache=True, nogil=True)
def _slot(key, shift):  # pragma: no cover - compiled
    return np.int64((np.uint64(key) * _GOLDEN) >> shift)


@njit(cache=True, nogil=True)
def _build(keys, valid, bits):  # pragma: no cover - compiled
    """The table of ``keys`` (rows with ``valid`` false left out): slot keys, slot rows
    (-1: empty) and slot repeated flags."""
    size = np.int64(1) << bits
    mask = size - 1
    shift = np.uint64(64 - bits)
    slot_key = np.zeros(size, np.int64)
    slot_row = np.full(size, -1, np.int64)
    slot_dup = np.zeros(size, np.bool_)
    for i in range(keys.size):
        if not valid[i]:
            continue
        k = keys[i]
        h = _slot(k, shift)
        while True:
            r = slot_row[h]
            if r < 0:
                slot_row[h] = i
                slot_key[h] = k
                break
            if slot_key[h] == k:
                slot_dup[h] = True
                break
            h = (h + 1) & mask
    return slot_key, slot_row, slot_dup


@njit(cache=True, nogil=True)
def _probe_range(keys, valid, slot_key, slot_row, slot_dup, bits, out, lo, hi):  # pragma: no cover - compiled
    """``out[i]`` for target rows ``lo..hi``; returns the first row whose key more than one
    source row holds (-1: none)."""
    mask = (np.int64(1) << bits) - 1
    shift = np.uint64(64 - bits)
    ambiguous = np.int64(-1)
    for i in range(lo, hi):
        out[i] = -1
        if not valid[i]:
            continue
        k = keys[i]
        h = _slot(k, shift)
        while True:
            r = slot_row[h]
            if r < 0:
                break
            if slot_key[h] == k:
                out[i] = r
                if slot_dup[h] and ambiguous < 0:
                    ambiguous = np.int64(i)
                break
            h = (h + 1) & mask
    return ambiguous


@njit(cache=True, nogil=True, parallel=True)
def _probe(keys, valid, slot_key, slot_row, slot_dup, bits, out):  # pragma: no cover - compiled
    n = keys.size
    tasks = (n + _PROBE_CHUNK - 1) // _PROBE_CHUNK
    first = np.full(max(tasks, 1), -1, np.int64)
    for t in prange(tasks):
        lo = t * _PROBE_CHUNK
        first[t] = _probe_range(keys, valid, slot_key, slot_row, slot_dup, bits, out, lo, min(lo + _PROBE_CHUNK, n))
    for t in range(tasks):
        if first[t] >= 0:
            return first[t]
    return -1


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


def match_int_keys(
    target: tuple[np.ndarray, np.ndarray], source: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, int]:
    """Per target row, the source row with an equal key (-1: none), and the first target
    row that more than one source row matches (-1: none).  ``target`` / ``source`` are
    :func:`int_keys` results."""
    tkeys, tvalid = target
    skeys, svalid = source
    bits = max(4, int(2 * max(int(skeys.size), 1) - 1).bit_length())
    slot_key, slot_row, slot_dup = _build(skeys, svalid, bits)
    out = np.empty(tkeys.size, np.int64)
    ambiguous = int(_probe(tkeys, tvalid, slot_key, slot_row, slot_dup, bits, out)) if tkeys.size else -1
    return out, ambiguous
