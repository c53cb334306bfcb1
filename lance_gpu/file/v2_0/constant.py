# SPDX-License-Identifier: Apache-2.0
"""Constant: every value equals ``value`` (its little-endian bytes).

pylance 14 does not write this variant in 2.0 pages (and its 2.0 reader does not accept it);
it is decoded here for completeness: an empty ``value`` means all nulls, a boolean field
takes the first byte as the value.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_gpu.file.v2_0.blocks import AllNull, Bits, Fixed
from lance_gpu.file.v2_0.page import PageSource


def decode(msg, src: PageSource, start: int, stop: int, arrow_type):
    value = np.frombuffer(msg.value, np.uint8)
    n = stop - start
    if value.size == 0:
        return AllNull(n)
    if arrow_type is not None and pa.types.is_boolean(arrow_type):
        return Bits(np.full(n, bool(value[0] & 1)))
    return Fixed(np.tile(value, n), value.size * 8)
