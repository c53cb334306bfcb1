# SPDX-License-Identifier: Apache-2.0
"""FSST compression on the GPU (the device twin of
:func:`lance_gpu.file.encodings.fsst.compress_strings`, same bytes).

The symbol table is trained on the host exactly as the CPU encoder trains it: the same
~16 KiB random sample of whole strings (:func:`~lance_gpu.file.encodings.fsst._encoder.sample_picks`
on the host offsets; the picked strings are gathered on the device and read back) fed to
the same trainer.  Compression is greedy longest match over the table, one thread per string
(grid-stride), in two passes: the compressed length of every string, a scan into offsets,
then the codes -- each code a symbol number, or 255 and a literal byte.  The lookup index
(symbols of 2+ bytes grouped by their first two bytes, longest first; the one-byte symbol of
every byte value) is the CPU reference compressor's, built on the host and uploaded.
"""

from __future__ import annotations

import numpy as np

from cuda_kernels._target import LAZY_CUDA, gpu_kernel

cuda = LAZY_CUDA

__all__ = ["compress_strings"]

ESCAPE = 255


@gpu_kernel
def _fsst_kernel(data, offsets, m, vals, lens, order, starts, single, out_off, out, write):
    # pass 1 (write == 0): out_off[r + 1] = compressed length of string r;
    # pass 2 (write == 1): codes of string r at out[out_off[r]:]
    first = cuda.grid(1)
    step = cuda.gridsize(1)
    for r in range(first, m, step):
        pos = offsets[r]
        e = offsets[r + 1]
        q = out_off[r] if write else 0
        while pos < e:
            avail = e - pos
            s = -1
            if avail >= 2:
                key = np.int64(data[pos]) | (np.int64(data[pos + 1]) << 8)
                w = np.uint64(0)
                top = min(avail, 8)
                for i in range(top):
                    w |= np.uint64(data[pos + i]) << np.uint64(8 * i)
                for j in range(starts[key], starts[key + 1]):
                    c = order[j]
                    ln = np.int64(lens[c])
                    mask = np.uint64(0xFFFFFFFFFFFFFFFF) if ln >= 8 else (np.uint64(1) << np.uint64(8 * ln)) - np.uint64(1)
                    if ln <= avail and (w & mask) == vals[c]:
                        s = c
                        break
            if s < 0:
                s = single[np.int64(data[pos])]
            if s >= 0:
                if write:
                    out[q] = s
                q += 1
                pos += np.int64(lens[s])
            else:
                if write:
                    out[q] = ESCAPE
                    out[q + 1] = data[pos]
                q += 2
                pos += 1
        if not write:
            out_off[r + 1] = q


def _dims(m: int) -> tuple[int, int]:
    from cuda_kernels import _device as kdev

    if kdev.is_simulator():
        return max(1, min(4, -(-m // 256))), 32
    return kdev.launch_dims(m, 128)


def compress_strings(host_offsets: np.ndarray, d_offsets, d_data) -> tuple[bytes, np.ndarray, object, object]:
    """FSST-compress the strings whose int64 offsets are ``d_offsets`` (device, indexing
    ``d_data``) and ``host_offsets`` (the same on the host).  Returns ``(symbol table bytes,
    host compressed offsets from 0, device compressed offsets, device compressed bytes)``."""
    import cuda_kernels as ck
    from cuda_kernels import _device as kdev
    from lance_gpu.file.encodings.fsst import _encoder, symbol_table_bytes

    host_offsets = np.ascontiguousarray(host_offsets, np.int64)
    m = host_offsets.size - 1
    picks = _encoder.sample_picks(host_offsets - host_offsets[0])
    if picks is None:
        lo, hi = int(host_offsets[0]), int(host_offsets[-1])
        sdata = kdev.to_host(d_data[lo:hi]) if hi > lo else np.zeros(0, np.uint8)
        soff = host_offsets - lo
    else:
        off, sbytes = ck.gather_binary_gpu(d_offsets, d_data, kdev.to_device(picks))
        soff = kdev.to_host(off).astype(np.int64)
        sdata = kdev.to_host(sbytes) if int(soff[-1]) else np.zeros(0, np.uint8)
    vals, lens = _encoder.train(np.ascontiguousarray(sdata, np.uint8), np.ascontiguousarray(soff, np.int64))
    order, starts, single = _encoder._index(_encoder._pad(vals), _encoder._pad(lens), vals.size)
    d_vals = kdev.to_device(_encoder._pad(vals))
    d_lens = kdev.to_device(_encoder._pad(lens))
    d_order, d_starts, d_single = kdev.to_device(order), kdev.to_device(starts), kdev.to_device(single)
    out_off = kdev.device_zeros(m + 1, np.int64)
    blocks, tpb = _dims(m)
    dummy = kdev.device_empty(1, np.uint8)
    kernel = _fsst_kernel.get()
    kernel[blocks, tpb](d_data, d_offsets, np.int64(m), d_vals, d_lens, d_order, d_starts, d_single, out_off, dummy, 0)
    lengths = kdev.to_host(out_off)[1:]
    comp_off = np.zeros(m + 1, np.int64)
    np.cumsum(lengths, out=comp_off[1:])
    d_comp_off = kdev.to_device(comp_off)
    out = kdev.device_empty(max(int(comp_off[-1]), 1), np.uint8)
    kernel[blocks, tpb](d_data, d_offsets, np.int64(m), d_vals, d_lens, d_order, d_starts, d_single, d_comp_off, out, 1)
    return symbol_table_bytes(vals, lens), comp_off, d_comp_off, out[: int(comp_off[-1])]
