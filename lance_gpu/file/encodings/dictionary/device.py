# SPDX-License-Identifier: Apache-2.0
"""Page dictionaries built on the GPU for fixed-width values (64-bit in 2.2, 128-bit).

The CPU encoder's dictionary (``lance_gpu.write.pages``) holds the page's distinct values in
order of first occurrence, with u32 indices.  On the device, for a page large enough that the
CPU encoder samples it first, the distinct values of the same sample (read back: at most
8192 values) are the candidate keys, sorted; then:

1. every value is looked up in the sorted keys (binary search, one thread per value in a
   grid-stride loop), giving its key slot, and each slot keeps the first position that
   holds it (atomic min); a value missing from the keys raises a flag;
2. one readback (the flag and the first positions, one per key): a miss means the sample
   did not see every value, and the page goes to the CPU encoder; otherwise the keys are
   the exact distinct values, ranked by first position;
3. a gather turns slots into u32 indices by that rank.

Strings work the same way, compared as byte strings (``memcmp`` order, a prefix first).
Keys are compared as 64-bit words (128-bit values as two, in order), so values are equal
exactly when their bit patterns are (floats by bit pattern, as the CPU encoder hashes them).
"""

from __future__ import annotations

import numpy as np

from cuda_kernels._target import LAZY_CUDA, gpu_kernel

cuda = LAZY_CUDA

__all__ = ["dictionary_of_sample", "string_dictionary_of_sample"]


@gpu_kernel
def _lookup_kernel(words, kw, n, keys, m, slots, first, miss):
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
            miss[0] = 1
        else:
            slots[i] = found
            cuda.atomic.min(first, found, i)


@gpu_kernel
def _lookup_strings_kernel(offsets, data, n, key_offsets, key_data, m, slots, first, miss):
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
            miss[0] = 1
        else:
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


def dictionary_of_sample(words, kw: int, sample_keys: np.ndarray) -> tuple[np.ndarray, object] | None:
    """The page dictionary of ``n`` values given as ``kw`` uint64 words each (device
    ``words``, ``n * kw`` of them), if the distinct ``sample_keys`` (host uint64, ``m x kw``,
    sorted lexicographically and unique) hold every value: ``(items in order of first
    occurrence as host uint64 m x kw, device u32 indices)``; None when some value is not a
    key."""
    from cuda_kernels import _device as kdev

    n = int(words.shape[0]) // kw
    m = int(sample_keys.shape[0])
    keys = kdev.to_device(np.ascontiguousarray(sample_keys, np.uint64).reshape(-1))
    slots = kdev.device_empty(n, np.int32)
    first = kdev.device_full(m, np.int64, np.iinfo(np.int64).max)
    miss = kdev.device_zeros(1, np.int32)
    blocks, tpb = _dims(n)
    _lookup_kernel.get()[blocks, tpb](words, np.int64(kw), np.int64(n), keys, np.int64(m), slots, first, miss)
    if int(miss.copy_to_host()[0]):
        return None
    order = np.argsort(first.copy_to_host(), kind="stable")
    rank = np.empty(m, np.uint32)
    rank[order] = np.arange(m, dtype=np.uint32)
    out = kdev.device_empty(n, np.uint32)
    _remap_kernel.get()[blocks, tpb](slots, kdev.to_device(rank), np.int64(n), out)
    return np.ascontiguousarray(sample_keys.reshape(m, kw)[order]), out


def _ranks(first, m: int):
    from cuda_kernels import _device as kdev

    order = np.argsort(first.copy_to_host(), kind="stable")
    rank = np.empty(m, np.uint32)
    rank[order] = np.arange(m, dtype=np.uint32)
    return order, kdev.to_device(rank)


def string_dictionary_of_sample(offsets, data, n: int, keys: list[bytes]) -> tuple[list[bytes], object] | None:
    """:func:`dictionary_of_sample` for byte strings: ``offsets`` (device int64, ``n + 1``,
    indexing ``data``) and the distinct sampled ``keys`` sorted as bytes.  Returns (items in
    order of first occurrence, device u32 indices) or None when some value is not a key."""
    from cuda_kernels import _device as kdev

    m = len(keys)
    key_offsets = np.zeros(m + 1, np.int64)
    np.cumsum([len(k) for k in keys], out=key_offsets[1:])
    key_data = np.frombuffer(b"".join(keys) or b"\0", np.uint8)
    slots = kdev.device_empty(n, np.int32)
    first = kdev.device_full(m, np.int64, np.iinfo(np.int64).max)
    miss = kdev.device_zeros(1, np.int32)
    blocks, tpb = _dims(n)
    _lookup_strings_kernel.get()[blocks, tpb](
        offsets, data, np.int64(n), kdev.to_device(key_offsets), kdev.to_device(key_data), np.int64(m), slots, first, miss
    )
    if int(miss.copy_to_host()[0]):
        return None
    order, rank = _ranks(first, m)
    out = kdev.device_empty(n, np.uint32)
    _remap_kernel.get()[blocks, tpb](slots, rank, np.int64(n), out)
    return [keys[i] for i in order], out
