# SPDX-License-Identifier: Apache-2.0
"""RLE mini-block chunks written on the GPU (the device twin of
:func:`lance_gpu.file.encodings.rle.encode_miniblock`, same bytes).

The chunking is the CPU's rule: each chunk starts where the previous one ended and holds
the largest power-of-two number of values, at most 4096, whose runs -- split at 255 -- fit
in ``MAX_MINIBLOCK_BYTES`` of values and u8 lengths (the last chunk: what is left, or less).
The rule is sequential in the chunks, not in the values, so it is planned in steps:

1. run starts: a flag per value (``v[i] != v[i - 1]``), compacted (the runs, unsplit);
2. per run its entries ``ceil(length / 255)``, scanned: the entries of any stretch of whole
   runs is a difference of two prefix sums, and of a window ``[a, b)`` that plus the
   clipped runs at its ends, found by binary search in the run starts (O(log runs));
3. one thread plans the chunks with that count (a dozen sizes tried per chunk, each
   O(log runs)), writing per chunk its first value, values and entries and where its
   entries go;
4. one thread per chunk writes its run values and lengths.

The values never leave the device; the per-chunk counts (one pair per chunk) come back.
RLE is chosen only for pages with fewer runs than half their values.
"""

from __future__ import annotations

import numpy as np

from cuda_kernels._target import LAZY_CUDA, gpu_kernel
from lance_gpu._proto import encodings_v2_1_pb2 as pb
from lance_gpu.file.encodings.base import MiniBlockChunks
from lance_gpu.file.encodings.flat import MAX_MINIBLOCK_BYTES
from lance_gpu.file.encodings.rle import MAX_CHUNK_VALUES

cuda = LAZY_CUDA

__all__ = ["encode_miniblock"]


@gpu_kernel
def _run_start_flags_kernel(v, n, flags):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        flags[i] = i == 0 or v[i] != v[i - 1]


@gpu_kernel
def _run_entries_kernel(starts, nruns, n, entries):
    # entries of each whole run (split at 255)
    for k in range(cuda.grid(1), nruns, cuda.gridsize(1)):
        end = starts[k + 1] if k + 1 < nruns else n
        entries[k] = (end - starts[k] + 254) // 255


@gpu_kernel
def _plan_kernel(starts, nruns, prefix, n, value_bytes, max_bytes, max_values, first, counts, runs, out_start, totals):
    # one thread: the CPU's chunking, each window's entries counted from the run starts and
    # the prefix of whole runs' entries
    if cuda.grid(1) != 0:
        return
    k = 0
    c = 0
    pos = 0
    while pos < n:
        size = max_values
        take = 0
        e = 0
        while True:
            take = min(size, n - pos)
            b = pos + take
            # ra: the run holding pos; rb: the run holding b - 1 (the last start <= x)
            lo = 0
            hi = nruns
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if starts[mid] <= pos:
                    lo = mid
                else:
                    hi = mid
            ra = lo
            hi = nruns
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if starts[mid] <= b - 1:
                    lo = mid
                else:
                    hi = mid
            rb = lo
            if ra == rb:
                e = (take + 254) // 255
            else:
                e = (starts[ra + 1] - pos + 254) // 255 + (prefix[rb] - prefix[ra + 1]) + (b - starts[rb] + 254) // 255
            if e * (value_bytes + 1) <= max_bytes or size == 1:
                break
            size //= 2
        first[c] = pos
        counts[c] = take
        runs[c] = e
        out_start[c] = k
        k += e
        c += 1
        pos += take
    totals[0] = k
    totals[1] = c


@gpu_kernel
def _write_runs_kernel(v, first, counts, out_start, nchunks, vals, lens):
    # one thread per chunk: its runs, split at 255, as the CPU writes them
    for c in range(cuda.grid(1), nchunks, cuda.gridsize(1)):
        pos = first[c]
        end = pos + counts[c]
        k = out_start[c]
        run = 1
        for i in range(pos + 1, end):
            if v[i] == v[i - 1] and run < 255:
                run += 1
            else:
                vals[k] = v[i - 1]
                lens[k] = run
                k += 1
                run = 1
        vals[k] = v[end - 1]
        lens[k] = run


def _stride_dims(n: int) -> tuple[int, int]:
    from cuda_kernels import _device as kdev

    if kdev.is_simulator():
        return max(1, min(4, -(-n // 256))), 32  # few threads, each looping (Python threads)
    return kdev.launch_dims(max(1, -(-n // 8)), 256)


def encode_miniblock(values) -> MiniBlockChunks:
    """``Rle{values: Flat{T}, run_lengths: Flat{8}}`` chunks of the device uintT ``values``
    (per chunk the run values, then the u8 run lengths: two chunk buffers)."""
    from cuda_kernels import _device as kdev
    from cuda_kernels.compact import kept_indices_gpu

    dt = np.dtype(values.dtype)
    width = dt.itemsize
    n = int(values.shape[0])
    enc = pb.CompressiveEncoding(
        rle=pb.Rle(
            values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=8 * width)),
            run_lengths=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=8)),
        )
    )
    if n == 0:
        empty = np.zeros(0, np.int64)
        return MiniBlockChunks(empty, [(kdev.device_empty(0, np.uint8), empty), (kdev.device_empty(0, np.uint8), empty)], enc)
    flags = kdev.device_empty(n, np.bool_)
    blocks, tpb = _stride_dims(n)
    _run_start_flags_kernel.get()[blocks, tpb](values, np.int64(n), flags)
    starts = kept_indices_gpu(flags)
    nruns = int(starts.shape[0])
    entries = kdev.device_empty(nruns, np.int64)
    blocks, tpb = _stride_dims(nruns)
    _run_entries_kernel.get()[blocks, tpb](starts, np.int64(nruns), np.int64(n), entries)
    prefix = kdev.exclusive_scan_device(entries)
    max_chunks = n  # a chunk holds at least one value
    first = kdev.device_empty(max_chunks, np.int64)
    counts = kdev.device_empty(max_chunks, np.int64)
    runs = kdev.device_empty(max_chunks, np.int64)
    out_start = kdev.device_empty(max_chunks, np.int64)
    totals = kdev.device_zeros(2, np.int64)
    _plan_kernel.get()[1, 1](
        starts, np.int64(nruns), prefix, np.int64(n), np.int64(width), np.int64(MAX_MINIBLOCK_BYTES), np.int64(MAX_CHUNK_VALUES),
        first, counts, runs, out_start, totals,
    )
    k, c = (int(x) for x in totals.copy_to_host())
    vals = kdev.device_empty(k, dt)
    lens = kdev.device_empty(k, np.uint8)
    blocks, tpb = _stride_dims(c) if kdev.is_simulator() else kdev.launch_dims(c, 64)  # a thread per chunk
    _write_runs_kernel.get()[blocks, tpb](values, first, counts, out_start, np.int64(c), vals, lens)
    h_counts = counts[:c].copy_to_host()
    h_runs = runs[:c].copy_to_host()
    return MiniBlockChunks(h_counts, [(vals.view(np.uint8), h_runs * width), (lens, h_runs.copy())], enc)
