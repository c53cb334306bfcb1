# SPDX-License-Identifier: Apache-2.0
"""ConstantLayout (``AllNullLayout`` in older 2.1 protos): a page whose items are all null,
or all equal to ``inline_value`` (at most 32 bytes).

If the page has levels, the repetition levels are buffer 0 and the definition levels the
next buffer; ``rep_compression`` / ``def_compression`` absent means raw u16 levels.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.file import encodings
from lance_gpu.file.blocks import FixedWidthBlock
from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.page import LeafPage
from lance_gpu.file.v2_1.fullzip import invisible_table


def _levels(enc_present: bool, enc, buf: np.ndarray, n: int, ctx: DecodeContext) -> np.ndarray:
    if not enc_present:
        if buf.size < 2 * n:
            raise ctx.corrupt("constant page level buffer is truncated")
        return buf[: 2 * n].copy().view(np.uint16)
    block = encodings.decode_block(enc, buf, n, ctx)
    if not isinstance(block, FixedWidthBlock) or block.bits_per_value != 16:
        raise ctx.corrupt("levels must decode to 16-bit values")
    return block.as_uint()


def decode(layout, buffers: list[np.ndarray], num_rows: int, ctx: DecodeContext) -> LeafPage:
    layers = tuple(int(x) for x in layout.layers) or (3,)
    nrep = int(getattr(layout, "num_rep_values", 0))
    ndef = int(getattr(layout, "num_def_values", 0))
    bi = 0
    rep = def_ = None
    if nrep:
        if bi >= len(buffers):
            raise ctx.corrupt("constant page lacks its repetition buffer")
        rep = _levels(layout.HasField("rep_compression"), layout.rep_compression, buffers[bi], nrep, ctx)
        bi += 1
    if ndef:
        if bi >= len(buffers):
            raise ctx.corrupt("constant page lacks its definition buffer")
        def_ = _levels(layout.HasField("def_compression"), layout.def_compression, buffers[bi], ndef, ctx)
        bi += 1
    num_levels = max(nrep, ndef) if (nrep or ndef) else num_rows
    if def_ is not None:
        table = invisible_table(layers)
        if def_.size and int(def_.max()) >= table.size:
            raise ctx.corrupt("constant page holds an impossible definition level")
        num_visible = int(np.count_nonzero(~table[def_]))
    else:
        num_visible = num_levels
    values = None
    if layout.HasField("inline_value"):
        values = ("constant", bytes(layout.inline_value))
    return LeafPage(values, num_visible, rep, def_, num_levels, layers, num_rows)  # type: ignore[arg-type]
