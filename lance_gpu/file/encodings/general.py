# SPDX-License-Identifier: Apache-2.0
"""General: a general-purpose compressor (LZ4 or Zstandard) around another encoding.

Framing, per compressed buffer:

* LZ4:  ``u32 LE uncompressed_size`` then one raw LZ4 *block*.
* Zstd: ``u64 LE uncompressed_size`` then a standard zstd frame.  Older files may hold a bare
  frame, recognised by the zstd magic ``28 b5 2f fd``.

In a mini-block page it wraps each chunk's buffer; in a block (dictionary items) the whole
buffer; in a full-zip page each value.
"""

from __future__ import annotations

import struct

import numpy as np

from lance_gpu._proto import encodings_v2_1_pb2 as pb
from lance_gpu.errors import LanceGpuError
from lance_gpu.file.encodings import dispatch
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext

LZ4 = pb.COMPRESSION_ALGORITHM_LZ4  # 1
ZSTD = pb.COMPRESSION_ALGORITHM_ZSTD  # 2
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def decompress(compression, buf: np.ndarray | bytes, ctx: DecodeContext) -> np.ndarray:
    scheme = int(compression.scheme)
    raw = buf.tobytes() if isinstance(buf, np.ndarray) else bytes(buf)
    try:
        if scheme == LZ4:
            import lz4.block

            if len(raw) < 4:
                raise ctx.corrupt("LZ4 buffer shorter than its size prefix")
            (size,) = struct.unpack_from("<I", raw, 0)
            if size > 255 * len(raw) + 64:  # beyond LZ4's best ratio: a corrupt prefix
                raise ctx.corrupt(f"LZ4 buffer of {len(raw)} bytes claims {size} bytes uncompressed")
            out = lz4.block.decompress(raw[4:], uncompressed_size=size)
        elif scheme == ZSTD:
            import zstandard

            if raw[:4] == _ZSTD_MAGIC:
                out = zstandard.ZstdDecompressor().decompress(raw)
            else:
                if len(raw) < 8:
                    raise ctx.corrupt("zstd buffer shorter than its size prefix")
                (size,) = struct.unpack_from("<Q", raw, 0)
                out = zstandard.ZstdDecompressor().decompress(raw[8:], max_output_size=size)
                if len(out) != size:
                    raise ctx.corrupt(f"zstd buffer decompressed to {len(out)} bytes, expected {size}")
        else:
            raise ctx.unsupported(f"general compression scheme {scheme}")
    except Exception as exc:  # lz4.block.LZ4BlockError and zstandard.ZstdError are plain Exceptions
        if isinstance(exc, LanceGpuError):
            raise
        raise ctx.corrupt(f"general decompression failed ({type(exc).__name__}: {exc})") from exc
    return np.frombuffer(out, dtype=np.uint8)


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext):
    new_bufs = []
    for cb in bufs:
        parts = [
            decompress(enc.compression, cb.data[s : s + z], ctx)
            for s, z in zip(cb.starts.tolist(), cb.sizes.tolist())
        ]
        sizes = np.array([p.size for p in parts], np.int64)
        starts = np.zeros(len(parts), np.int64)
        # Keep every decompressed chunk 8-byte aligned, as the originals were.
        aligned = ((sizes + 7) // 8) * 8
        if len(parts) > 1:
            starts[1:] = np.cumsum(aligned[:-1])
        data = np.zeros(int(aligned.sum()), np.uint8)
        for s, p in zip(starts.tolist(), parts):
            data[s : s + p.size] = p
        new_bufs.append(ChunkBuffers(data, starts, sizes, cb.counts))
    return dispatch.decode_miniblock(enc.values, new_bufs, ctx)


def decode_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext):
    return dispatch.decode_block(enc.values, decompress(enc.compression, buf, ctx), num_values, ctx)


# --------------------------------------------------------------------------------------------
# Encoder


def compress(scheme: int, data: bytes | np.ndarray, level: int | None = None) -> bytes:
    """Compress one buffer with Lance's framing (see the module docstring)."""
    raw = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
    if scheme == LZ4:
        import lz4.block

        return lz4.block.compress(raw, store_size=True)
    if scheme == ZSTD:
        import zstandard

        cctx = zstandard.ZstdCompressor(level=3 if level is None else int(level))
        return struct.pack("<Q", len(raw)) + cctx.compress(raw)
    raise ValueError(f"unknown general compression scheme {scheme}")
