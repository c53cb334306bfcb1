# SPDX-License-Identifier: Apache-2.0
"""Page dictionaries built on the GPU for fixed-width values (64-bit in 2.2, 128-bit).

The CPU encoder's dictionary (``lance_gpu.file.writer.pages``) holds the page's distinct values in
order of first occurrence, with u32 indices.  On the device, for a page large enough that the
CPU encoder samples it first, the distinct values of the same sample (read back: at most
8192 values) are the candidate keys, sorted; then:

1. every value is looked up in the sorted keys (binary search, one thread per value in a
   grid-stride loop), giving its key slot, and each slot keeps the first position that
   holds it (atomic min); a value missing from the keys marks its position and counts;
2. one readback (the miss count, then the first positions, one per key).  Misses (values
   the sample did not see) are compacted on the device and the first
   :data:`MISSES_PER_ROUND` of them read back; their distinct values join the keys and
   the lookup runs again -- until nothing misses, or the keys are more than the caller's
   rule allows (then the page has no dictionary: the CPU encoder's exact count would be
   larger still).  Each round adds at least one key, so the rounds are bounded by the cap;
   a rare value or two costs one more pass.  Without misses the keys are the exact
   distinct values, ranked by first position;
3. a gather turns slots into u32 indices by that rank.

Strings work the same way, compared as byte strings (``memcmp`` order, a prefix first).
Keys are compared as 64-bit words (128-bit values as two, in order), so values are equal
exactly when their bit patterns are (floats by bit pattern, as the CPU encoder hashes them).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cuda_kernels._target import LAZY_CUDA, gpu_kernel

cuda = LAZY_CUDA

__all__ = ["MISSES_PER_ROUND", "dictionary_of_sample", "string_dictionary_of_sample"]

#: Missed values read back per round (their distinct ones become keys).
MISSES_PER_ROUND = 4096


@gpu_kernel
def _lookup_kernel(words, kw, n, keys, m, slots, first, missed, miss):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for i in range(start, n, step):
        lo = 0
        hi = m
        found = -1
        while lo < hi:
            mid = (lo + hi) // 2
            cmp = 0
            for q in range(kw):
                a = words[i * kw + q]
                b = keys[mid * kw + q]
                if a < b:
                    cmp = -1
                    break
                if a > b:
                    cmp = 1
                    break
            if cmp == 0:
                found = mid
                break
            if cmp < 0:
                hi = mid
            else:
                lo = mid + 1
        if found < 0:
            missed[i] = True
            cuda.atomic.add(miss, 0, 1)
        else:
            missed[i] = False
            slots[i] = found
            cuda.atomic.min(first, found, i)


@gpu_kernel
def _lookup_strings_kernel(offsets, data, n, key_offsets, key_data, m, slots, first, missed, miss):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for i in range(start, n, step):
        a0 = offsets[i]
        alen = offsets[i + 1] - a0
        lo = 0
        hi = m
        found = -1
        while lo < hi:
            mid = (lo + hi) // 2
            b0 = key_offsets[mid]
            blen = key_offsets[mid + 1] - b0
            cmp = 0
            common = min(alen, blen)
            for q in range(common):
                x = data[a0 + q]
                y = key_data[b0 + q]
                if x != y:
                    cmp = -1 if x < y else 1
                    break
            if cmp == 0 and alen != blen:
                cmp = -1 if alen < blen else 1
            if cmp == 0:
                found = mid
                break
            if cmp < 0:
                hi = mid
            else:
                lo = mid + 1
        if found < 0:
            missed[i] = True
            cuda.atomic.add(miss, 0, 1)
        else:
            missed[i] = False
            slots[i] = found
            cuda.atomic.min(first, found, i)


@gpu_kernel
def _remap_kernel(slots, rank, n, out):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for i in range(start, n, step):
        out[i] = rank[slots[i]]


def _dims(n: int) -> tuple[int, int]:
    from cuda_kernels import _device as kdev

    if kdev.is_simulator():
        return max(1, min(4, -(-n // 256))), 32  # few threads, each looping (Python threads)
    return kdev.launch_dims(n, 256)


def _missed_positions(missed):
    """Device int64 positions of the first :data:`MISSES_PER_ROUND` missed values."""
    from cuda_kernels.compact import kept_indices_gpu

    pos = kept_indices_gpu(missed)
    return pos[: min(int(pos.shape[0]), MISSES_PER_ROUND)]


def _ranks(first, m: int):
    from cuda_kernels import _device as kdev

    order = np.argsort(kdev.to_host(first), kind="stable")
    rank = np.empty(m, np.uint32)
    rank[order] = np.arange(m, dtype=np.uint32)
    return order, kdev.to_device(rank)


def dictionary_of_sample(words, kw: int, sample_keys: np.ndarray, too_many: Callable[[int], bool]) -> tuple[np.ndarray, object] | None:
    """The page dictionary of ``n`` values given as ``kw`` uint64 words each (device
    ``words``, ``n * kw`` of them), starting from the distinct ``sample_keys`` (host
    uint64, ``m x kw``, sorted lexicographically and unique) and adding the values they
    miss: ``(items in order of first occurrence as host uint64 card x kw, device u32
    indices)``; None as soon as ``too_many(keys found)`` (no dictionary for this page)."""
    import cuda_kernels as ck
    from cuda_kernels import _device as kdev

    n = int(words.shape[0]) // kw
    keys_host = np.ascontiguousarray(sample_keys, np.uint64).reshape(-1, kw)
    slots = kdev.device_empty(n, np.int32)
    missed = kdev.device_empty(n, np.bool_)
    blocks, tpb = _dims(n)
    rows = words.reshape(n, kw) if kw > 1 else words
    while True:
        m = int(keys_host.shape[0])
        if too_many(m):
            return None
        first = kdev.device_full(m, np.int64, np.iinfo(np.int64).max)
        miss = kdev.device_zeros(1, np.int64)
        keys = kdev.to_device(keys_host.reshape(-1))
        _lookup_kernel.get()[blocks, tpb](words, np.int64(kw), np.int64(n), keys, np.int64(m), slots, first, missed, miss)
        if not int(kdev.to_host(miss)[0]):
            break
        got = kdev.to_host(ck.gather_fixed_gpu(rows, _missed_positions(missed)))
        more = np.ascontiguousarray(got).view(np.uint64).reshape(-1, kw)
        keys_host = np.unique(np.concatenate([keys_host, more]), axis=0)
    order, rank = _ranks(first, m)
    out = kdev.device_empty(n, np.uint32)
    _remap_kernel.get()[blocks, tpb](slots, rank, np.int64(n), out)
    return np.ascontiguousarray(keys_host[order]), out


def string_dictionary_of_sample(offsets, data, n: int, keys: list[bytes], too_many: Callable[[int], bool]) -> tuple[list[bytes], object] | None:
    """:func:`dictionary_of_sample` for byte strings: ``offsets`` (device int64, ``n + 1``,
    indexing ``data``) and the distinct sampled ``keys`` sorted as bytes.  Returns (items in
    order of first occurrence, device u32 indices), or None as soon as ``too_many(keys
    found)``."""
    import cuda_kernels as ck
    from cuda_kernels import _device as kdev

    slots = kdev.device_empty(n, np.int32)
    missed = kdev.device_empty(n, np.bool_)
    blocks, tpb = _dims(n)
    while True:
        m = len(keys)
        if too_many(m):
            return None
        key_offsets = np.zeros(m + 1, np.int64)
        np.cumsum([len(k) for k in keys], out=key_offsets[1:])
        key_data = np.frombuffer(b"".join(keys) or b"\0", np.uint8)
        first = kdev.device_full(m, np.int64, np.iinfo(np.int64).max)
        miss = kdev.device_zeros(1, np.int64)
        _lookup_strings_kernel.get()[blocks, tpb](
            offsets, data, np.int64(n), kdev.to_device(key_offsets), kdev.to_device(key_data), np.int64(m), slots, first, missed, miss
        )
        if not int(kdev.to_host(miss)[0]):
            break
        off, raw = ck.gather_binary_gpu(offsets, data, _missed_positions(missed))
        h_off = kdev.to_host(off).astype(np.int64)
        h_raw = kdev.to_host(raw).tobytes() if int(h_off[-1]) else b""
        more = {h_raw[a:b] for a, b in zip(h_off[:-1].tolist(), h_off[1:].tolist(), strict=True)}
        keys = sorted(set(keys) | more)
    order, rank = _ranks(first, m)
    out = kdev.device_empty(n, np.uint32)
    _remap_kernel.get()[blocks, tpb](slots, rank, np.int64(n), out)
    return [keys[i] for i in order], out
