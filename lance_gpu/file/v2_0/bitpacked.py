# SPDX-License-Identifier: Apache-2.0
"""Bitpacked: ``compressed_bits_per_value``, ``uncompressed_bits_per_value``, ``buffer``, ``signed``.

Plain sequential bit packing (not FastLanes): value ``i`` occupies bits
``[i * w, (i + 1) * w)`` of the buffer, LSB first; with ``signed`` the top of the ``w`` bits
is a sign bit.  Values widen to ``uncompressed_bits_per_value`` (8/16/32/64).  pylance 14
does not write it in 2.0 files; only the bytes of the wanted values are read.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.file.v2_0._kernels import unpack_lsb_stream
from lance_gpu.file.v2_0.blocks import Fixed
from lance_gpu.file.v2_0.page import PageSource

_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def decode(msg, src: PageSource, start: int, stop: int, arrow_type):
    w = int(msg.compressed_bits_per_value)
    ubits = int(msg.uncompressed_bits_per_value)
    if ubits not in _UINT:
        raise src.ctx.unsupported(f"2.0 Bitpacked to {ubits}-bit values")
    if not 0 <= w <= ubits:
        raise src.ctx.corrupt(f"Bitpacked width {w} exceeds the value width {ubits}")
    n = stop - start
    if w == 0 or n == 0:
        return Fixed(np.zeros(n * ubits // 8, np.uint8), ubits)
    first = start * w // 8
    last = (stop * w + 7) // 8
    raw = src.read(msg.buffer, first, last - first)
    out = np.empty(n, np.uint64)
    unpack_lsb_stream(raw, start * w - first * 8, n, w, bool(msg.signed), out)
    return Fixed(out.astype(_UINT[ubits]).view(np.uint8), ubits)
