# SPDX-License-Identifier: Apache-2.0
"""Rle: run-length encoding with two per-chunk buffers.

Buffer 0 holds the run values (``values``, a Flat encoding), buffer 1 the run lengths
(``run_lengths``, Flat{8}: u8, runs above 255 split).  Example: ``[1,1,1,2,2,3,3,3,3]`` →
values ``[1,2,3]``, lengths ``[3,2,4]``.  Runs never cross chunks.

This module is the CPU decode and encoder; the package holds the rest of the encoding:
:mod:`.gpu_plan` (device planning), :mod:`.decode_kernels` (device decoding: run expansion),
:mod:`.device` (device encoder) and :mod:`._native` (compiled CPU loops).
"""

from __future__ import annotations

import numpy as np

from lance_gpu._proto import encodings_v2_1_pb2 as pb
from lance_gpu.cpu import native
from lance_gpu.file.blocks import FixedWidthBlock
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext, MiniBlockChunks
from lance_gpu.file.encodings.flat import MAX_MINIBLOCK_BYTES


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
    """Block form (levels of constant pages): ``u64 values_bytes | values | run lengths``."""
    from cuda_kernels.rle import rle_expand

    venc, renc = enc.values, enc.run_lengths
    if venc.WhichOneof("compression") != "flat" or renc.WhichOneof("compression") != "flat":
        raise ctx.unsupported("RLE over anything but Flat values and run lengths")
    vbits = int(venc.flat.bits_per_value)
    rbits = int(renc.flat.bits_per_value)
    if vbits not in (8, 16, 32, 64) or rbits not in (8, 16, 32, 64):
        raise ctx.unsupported(f"RLE block with {vbits}-bit values / {rbits}-bit run lengths")
    vbytes, rbytes = vbits // 8, rbits // 8
    if buf.size < 8:
        raise ctx.corrupt("RLE block shorter than its header")
    values_size = int(buf[:8].copy().view("<u8")[0])
    if values_size % vbytes or 8 + values_size > buf.size:
        raise ctx.corrupt("RLE block values section out of range")
    nruns = values_size // vbytes
    runs_raw = buf[8 + values_size :]
    if runs_raw.size < nruns * rbytes:
        raise ctx.corrupt("RLE block has fewer run lengths than values")
    vals = buf[8 : 8 + values_size].copy().view(np.dtype(f"<u{vbytes}"))
    run_lengths = runs_raw[: nruns * rbytes].copy().view(np.dtype(f"<u{rbytes}"))
    if int(run_lengths.sum(dtype=np.uint64)) != num_values:
        raise ctx.corrupt(f"RLE block runs add up to {int(run_lengths.sum(dtype=np.uint64))} values, expected {num_values}")
    expanded = rle_expand(vals, run_lengths)
    return FixedWidthBlock(np.ascontiguousarray(expanded).view(np.uint8).reshape(-1), vbits, num_values)


# --------------------------------------------------------------------------------------------
# Encoder

#: Values per RLE mini-block chunk at most (as pylance 14 writes them).
MAX_CHUNK_VALUES = 4096


def run_count(values: np.ndarray) -> int:
    """Number of runs of equal consecutive values."""
    if values.size == 0:
        return 0
    return int(np.count_nonzero(values[1:] != values[:-1])) + 1


def encode_miniblock(values: np.ndarray):
    """``Rle{values: Flat{T}, run_lengths: Flat{8}}`` mini-block chunks of uint8/16/32/64
    ``values``: per chunk the run values, then the u8 run lengths (two chunk buffers)."""
    from lance_gpu.file.encodings.rle import _native

    dt = values.dtype
    width = dt.itemsize
    vals, lens, counts, runs = _native.rle_encode(
        np.ascontiguousarray(values).astype(np.uint64), width, MAX_MINIBLOCK_BYTES, MAX_CHUNK_VALUES
    )
    enc = pb.CompressiveEncoding(
        rle=pb.Rle(
            values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=8 * width)),
            run_lengths=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=8)),
        )
    )
    value_bytes = vals.astype(dt).view(np.uint8)
    return MiniBlockChunks(
        counts.astype(np.int64),
        [(value_bytes, runs * width), (lens, runs.astype(np.int64))],
        enc,
    )
