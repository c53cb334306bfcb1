# SPDX-License-Identifier: Apache-2.0
"""Rle: run-length encoding with two per-chunk buffers.

Buffer 0 holds the run values (``values``, a Flat encoding), buffer 1 the run lengths
(``run_lengths``, Flat{8}: u8, runs above 255 split).  Example: ``[1,1,1,2,2,3,3,3,3]`` →
values ``[1,2,3]``, lengths ``[3,2,4]``.  Runs never cross chunks.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.cpu import native
from lance_gpu.file.blocks import FixedWidthBlock
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext) -> FixedWidthBlock:
    from cuda_kernels.rle import rle_expand

    if len(bufs) < 2:
        raise ctx.corrupt("RLE mini-block chunk needs a values and a run-lengths buffer")
    vals_cb, runs_cb = bufs[0], bufs[1]
    venc, renc = enc.values, enc.run_lengths
    if venc.WhichOneof("compression") != "flat" or renc.WhichOneof("compression") != "flat":
        raise ctx.unsupported("RLE over anything but Flat values and run lengths")
    vbits = int(venc.flat.bits_per_value)
    rbits = int(renc.flat.bits_per_value)
    if vbits % 8 or rbits % 8 or vbits == 0 or rbits == 0:
        raise ctx.unsupported(f"RLE with {vbits}-bit values / {rbits}-bit run lengths")
    nruns = runs_cb.sizes // (rbits // 8)
    if np.any(vals_cb.sizes < nruns * (vbits // 8)):
        raise ctx.corrupt("RLE values buffer shorter than its run count")
    runs = native.gather_ranges(runs_cb.data, runs_cb.starts, nruns * (rbits // 8))
    values = native.gather_ranges(vals_cb.data, vals_cb.starts, nruns * (vbits // 8))
    rdt = np.dtype(f"<u{rbits // 8}")
    # Per-chunk buffers are padded to 8 bytes; run-length zero entries are padding.
    run_lengths = runs.view(rdt)
    if vbits in (8, 16, 32, 64):
        vals = values.view(np.dtype(f"<u{vbits // 8}"))
    else:
        vals = values.reshape(-1, vbits // 8)
    n = vals_cb.num_values
    expanded = rle_expand(vals, run_lengths)
    if expanded.shape[0] != n:
        # Chunk run lengths must add up to each chunk's count.
        raise ctx.corrupt(f"RLE runs expand to {expanded.shape[0]} values, expected {n}")
    return FixedWidthBlock(np.ascontiguousarray(expanded).view(np.uint8).reshape(-1), vbits, n)


def decode_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> FixedWidthBlock:
    raise ctx.unsupported("RLE as a block encoding")
