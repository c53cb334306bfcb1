# SPDX-License-Identifier: Apache-2.0
"""Access to the buffers one 2.0 page's ``ArrayEncoding`` tree refers to.

A leaf of the tree names a buffer as ``Buffer{buffer_index, buffer_type}``: a page buffer
(``page``, the common case), a column buffer (``column``) or a global file buffer
(``file``).  Decoders ask for byte ranges *within* such a buffer; every range is checked
against the buffer's size, so a bad offset in the file becomes a
:class:`~lance_gpu.errors.CorruptFileError` rather than a wrong answer.

Compressed ``Flat`` buffers (``Compression{scheme: "zstd" | "lz4"}``, opt-in through the
``lance-encoding:compression`` field metadata) are decompressed whole, once per page:

* ``zstd``: ``u64 LE uncompressed size`` then a zstd frame, or (older writers) a bare frame,
  recognised by the magic ``28 b5 2f fd`` with the frame header's reserved bit clear.
* ``lz4``:  ``u32 LE uncompressed size`` then one raw LZ4 block.
"""

from __future__ import annotations

import struct

import numpy as np

from lance_gpu._proto import encodings_v2_0_pb2 as pb
from lance_gpu.errors import LanceGpuError
from lance_gpu.file.encodings.base import DecodeContext

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_EMPTY = np.zeros(0, np.uint8)


def decompress(scheme: str, raw: np.ndarray, ctx: DecodeContext) -> np.ndarray:
    scheme = scheme.lower()
    if scheme in ("", "none"):
        return raw
    data = raw.tobytes()
    if not data:
        return _EMPTY
    try:
        if scheme == "zstd":
            import zstandard

            if len(data) < 8 or (data[:4] == _ZSTD_MAGIC and not data[4] & 0x10):
                out = zstandard.ZstdDecompressor().decompressobj().decompress(data)
            else:
                (size,) = struct.unpack_from("<Q", data, 0)
                out = zstandard.ZstdDecompressor().decompressobj().decompress(data[8:])
                if len(out) != size:
                    raise ctx.corrupt(f"zstd buffer decompressed to {len(out)} bytes, expected {size}")
        elif scheme == "lz4":
            import lz4.block

            if len(data) < 4:
                raise ctx.corrupt("LZ4 buffer shorter than its size prefix")
            (size,) = struct.unpack_from("<I", data, 0)
            if size > 255 * len(data) + 64:
                raise ctx.corrupt(f"LZ4 buffer claims an impossible size of {size} bytes")
            out = lz4.block.decompress(data[4:], uncompressed_size=size)
            if len(out) != size:
                raise ctx.corrupt(f"LZ4 buffer decompressed to {len(out)} bytes, expected {size}")
        else:
            raise ctx.unsupported(f"2.0 Flat compression scheme '{scheme}'")
    except LanceGpuError:
        raise
    except Exception as exc:  # zstandard.ZstdError, lz4's LZ4BlockError, MemoryError, ...
        raise ctx.corrupt(f"{scheme} decompression failed ({exc})") from exc
    return np.frombuffer(out, dtype=np.uint8)


class PageSource:
    """The buffers of one page (plus its column's and the file's) for the decoders."""

    def __init__(self, file, column, page, ctx: DecodeContext) -> None:
        self.file = file
        self.column = column
        self.page = page
        self.ctx = ctx
        self.num_rows = int(page.num_rows)
        self._decompressed: dict[tuple[int, int], np.ndarray] = {}

    def buffer_range(self, buf: pb.Buffer) -> tuple[int, int]:
        """``(file offset, size)`` of the buffer a ``Buffer`` message names."""
        kind = int(buf.buffer_type)
        i = int(buf.buffer_index)
        if kind == pb.Buffer.page:
            offs, sizes, what = self.page.buffer_offsets, self.page.buffer_sizes, "page"
        elif kind == pb.Buffer.column:
            offs, sizes, what = self.column.buffer_offsets, self.column.buffer_sizes, "column"
        elif kind == pb.Buffer.file:
            gbo = getattr(self.file, "_gbo", None)
            if gbo is None or not 0 <= i < len(gbo):
                raise self.ctx.corrupt(f"file buffer {i} does not exist")
            return int(gbo[i][0]), int(gbo[i][1])
        else:
            raise self.ctx.corrupt(f"unknown buffer type {kind}")
        if not 0 <= i < len(offs) or len(offs) != len(sizes):
            raise self.ctx.corrupt(f"{what} buffer {i} does not exist ({len(offs)} {what} buffers)")
        return int(offs[i]), int(sizes[i])

    def size(self, buf: pb.Buffer) -> int:
        return self.buffer_range(buf)[1]

    def read(self, buf: pb.Buffer, start: int, length: int) -> np.ndarray:
        """``length`` bytes at ``start`` within the buffer."""
        off, size = self.buffer_range(buf)
        if start < 0 or length < 0 or start + length > size:
            raise self.ctx.corrupt(
                f"byte range [{start}, {start + length}) lies outside a page buffer of {size} bytes"
            )
        if length == 0:
            return _EMPTY
        return self.file.read_buffers([(off + start, length)])[0]

    def read_decompressed(self, buf: pb.Buffer, scheme: str, start: int, length: int) -> np.ndarray:
        """Like :meth:`read`, on the decompressed contents of a compressed buffer."""
        key = (int(buf.buffer_type), int(buf.buffer_index))
        whole = self._decompressed.get(key)
        if whole is None:
            whole = decompress(scheme, self.read(buf, 0, self.size(buf)), self.ctx)
            self._decompressed[key] = whole
        if start < 0 or length < 0 or start + length > whole.size:
            raise self.ctx.corrupt(
                f"byte range [{start}, {start + length}) lies outside a decompressed buffer of {whole.size} bytes"
            )
        return whole[start : start + length]
