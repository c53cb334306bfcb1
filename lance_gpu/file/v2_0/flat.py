# SPDX-License-Identifier: Apache-2.0
"""Flat: ``bits_per_value`` (1 or a multiple of 8), ``buffer``, optional ``compression``.

Values are packed back to back, little-endian; one-bit values (booleans, validity) are
LSB-first.  Uncompressed, only the bytes of the wanted rows are read.  A compressed buffer
(``zstd`` or ``lz4``, see :mod:`lance_gpu.file.v2_0.page`) is decompressed whole once per
page and then sliced.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.file.v2_0.blocks import Bits, Fixed
from lance_gpu.file.v2_0.page import PageSource


def _read(msg, src: PageSource, start: int, length: int) -> np.ndarray:
    if msg.HasField("compression") and msg.compression.scheme.lower() not in ("", "none"):
        return src.read_decompressed(msg.buffer, msg.compression.scheme, start, length)
    return src.read(msg.buffer, start, length)


def decode(msg, src: PageSource, start: int, stop: int, arrow_type):
    bits = int(msg.bits_per_value)
    n = stop - start
    if bits == 1:
        first = start // 8
        raw = _read(msg, src, first, (stop + 7) // 8 - first)
        shift = start - first * 8
        values = np.unpackbits(raw, bitorder="little")[shift : shift + n].astype(bool)
        return Bits(values)
    if bits == 0 or bits % 8:
        raise src.ctx.unsupported(f"2.0 Flat with {bits} bits per value")
    width = bits // 8
    return Fixed(_read(msg, src, start * width, n * width), bits)
