# SPDX-License-Identifier: Apache-2.0
"""FixedSizeBinary: ``bytes``, ``byte_width``.

Strings or binary values that all have the same length, stored as their bytes back to
back (pylance chooses it from 2.1 on, never in a 2.0 file; decoded here for completeness).
The result is a variable-width block with offsets ``i * byte_width``.  The bytes child is
normally a Flat of 8-bit values indexed by byte; a Flat of ``8 * byte_width``-bit values is
indexed by row.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.file.v2_0 import registry
from lance_gpu.file.v2_0.blocks import Fixed, Var
from lance_gpu.file.v2_0.page import PageSource


def decode(msg, src: PageSource, start: int, stop: int, arrow_type):
    width = int(msg.byte_width)
    if width <= 0:
        raise src.ctx.corrupt(f"FixedSizeBinary byte width {width}")
    n = stop - start
    if registry.inner_flat_bits(msg.bytes) == 8 * width and width > 1:
        data = registry.decode(msg.bytes, src, start, stop, None)
    else:
        data = registry.decode(msg.bytes, src, start * width, stop * width, None)
    if not isinstance(data, Fixed) or data.data.size != n * width:
        raise src.ctx.corrupt("FixedSizeBinary bytes do not match the row count")
    offsets = np.arange(n + 1, dtype=np.int64) * width
    return Var(offsets, data.data)
