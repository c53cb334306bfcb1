# SPDX-License-Identifier: Apache-2.0
"""Binary: ``indices``, ``bytes``, ``null_adjustment``.

``indices`` holds one unsigned **end** offset per value (no leading 0) into ``bytes`` (a
Flat of 8-bit values, possibly compressed).  A null value stores ``end + null_adjustment``
(the writer picks ``null_adjustment = total bytes + 1``, so any index at or above it is a
null); a null's end equals the previous end.  Offsets restart at 0 in every page.

To decode values ``[a, b)`` only indices ``[a - 1, b)`` and the bytes between the two ends
are read.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.file.v2_0 import registry
from lance_gpu.file.v2_0.blocks import Fixed, Nullable, Var
from lance_gpu.file.v2_0.page import PageSource


def normalize_ends(raw: np.ndarray, adjustment: int, src: PageSource, what: str):
    """``(ends int64, valid bool)`` from stored end offsets with the null adjustment."""
    if adjustment:
        adj = np.uint64(adjustment)
        valid = raw < adj
        ends = np.where(valid, raw, raw - adj)
        if ends.size and int(ends.max()) >= adjustment:
            raise src.ctx.corrupt(f"{what}: offset beyond twice the null adjustment {adjustment}")
    else:
        valid = np.ones(raw.size, bool)
        ends = raw
    if ends.size and int(ends.max()) > 2**62:
        raise src.ctx.corrupt(f"{what}: offset {int(ends.max())} is implausibly large")
    return ends.astype(np.int64), valid


def decode(msg, src: PageSource, start: int, stop: int, arrow_type):
    n = stop - start
    lo = start - 1 if start > 0 else 0
    raw = registry.decode_uint(msg.indices, src, lo, stop, "Binary indices")
    ends, valid = normalize_ends(raw, int(msg.null_adjustment), src, "Binary indices")
    if start > 0:
        base = int(ends[0])
        ends, valid = ends[1:], valid[1:]
    else:
        base = 0
    last = int(ends[-1]) if n else base
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    offsets[1:] = ends - base
    if n and int(np.diff(offsets).min()) < 0:
        raise src.ctx.corrupt("Binary end offsets run backwards")
    data = registry.decode(msg.bytes, src, base, last, None)
    if not isinstance(data, Fixed) or data.bits != 8 or data.n != last - base:
        raise src.ctx.corrupt("Binary bytes must decode to 8-bit values")
    block = Var(offsets, data.data)
    if valid.all():
        return block
    return Nullable(block, valid)
